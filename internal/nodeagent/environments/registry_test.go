package environments

import (
	"os"
	"path/filepath"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
)

// TestRegistryPinsAndRefusesASwappedRoot pins a real directory, then swaps another
// directory (and then a symlink) in at its path: every later check refuses with
// root-changed, and the pinned descriptor still names the directory pinned first.
func TestRegistryPinsAndRefusesASwappedRoot(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "work")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "marker"), []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := NewRegistry()
	roots := []backends.MountedRoot{{Name: "work", Path: dir}, {Name: "guest"}} // a VM root has no host path
	ids, err := reg.pin("env-1", roots, nil)
	if err != nil {
		t.Fatalf("pin: %v", err)
	}
	if ids["work"] == "" || len(ids) != 1 {
		t.Fatalf("pin recorded %v; want one identity for root work", ids)
	}
	if err := reg.VerifyRoots("env-1", roots); err != nil {
		t.Fatalf("VerifyRoots of the untouched root: %v", err)
	}
	// A second pass verifies and returns the same identity.
	again, err := reg.pin("env-1", roots, ids)
	if err != nil || again["work"] != ids["work"] {
		t.Fatalf("second pin = %v, %v; want %v", again, err, ids)
	}

	// Swap a different directory in at the same path.
	if err := os.Rename(dir, filepath.Join(base, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if code := actuation.CodeOf(reg.VerifyRoots("env-1", roots)); code != actuation.CodeRootChanged {
		t.Fatalf("VerifyRoots after a directory swap: code %q; want %q", code, actuation.CodeRootChanged)
	}
	if code := actuation.CodeOf(func() error { _, err := reg.pin("env-1", roots, ids); return err }()); code != actuation.CodeRootChanged {
		t.Fatalf("pin after a directory swap: code %q; want %q", code, actuation.CodeRootChanged)
	}
	// A fresh registry (a restarted agent) with the recorded identity refuses too.
	if code := actuation.CodeOf(func() error { _, err := NewRegistry().pin("env-1", roots, ids); return err }()); code != actuation.CodeRootChanged {
		t.Fatalf("pin by a new process after a swap: code %q; want %q", code, actuation.CodeRootChanged)
	}
	// A symlink swapped in (to the original directory) is refused as well.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "moved"), dir); err != nil {
		t.Fatal(err)
	}
	if code := actuation.CodeOf(func() error { _, err := NewRegistry().pin("env-2", roots, nil); return err }()); code != actuation.CodeRootChanged {
		t.Fatalf("pin through a symlink: code %q; want %q", code, actuation.CodeRootChanged)
	}

	// The pinned descriptor still reads the first directory.
	root, err := reg.PinnedRoot("env-1", "work")
	if err != nil {
		t.Fatalf("PinnedRoot: %v", err)
	}
	if _, err := reg.PinnedRoot("env-1", "guest"); actuation.CodeOf(err) != actuation.CodeRootChanged {
		t.Fatalf("PinnedRoot of an unpinned root: %v; want root-changed", err)
	}
	id, err := root.Identity()
	if err != nil || identityString(id) != ids["work"] {
		t.Fatalf("pinned root identity %v, %v; want %s", id, err, ids["work"])
	}

	reg.Forget("env-1")
	if _, err := reg.PinnedRoot("env-1", "work"); err == nil {
		t.Fatal("PinnedRoot after Forget: no error")
	}
	if err := reg.VerifyRoots("env-1", roots); actuation.CodeOf(err) != actuation.CodeRootChanged {
		t.Fatalf("VerifyRoots after Forget: %v; want root-changed (never pinned)", err)
	}
}

// TestRegistryMountedOnlyWhenReady: Mounted and Ref see an environment only as the room
// recorded it; an allocating one has no roots to offer.
func TestRegistryMountedOnlyWhenReady(t *testing.T) {
	reg := NewRegistry()
	spec := backends.Spec{ID: "uid-1", Ref: "ns/env"}
	reg.remember(spec, backends.Status{Phase: backends.PhaseAllocating})
	if _, ok := reg.Mounted("uid-1"); ok {
		t.Fatal("Mounted of an allocating environment: true")
	}
	if got := reg.Ref("uid-1"); got != "ns/env" {
		t.Fatalf("Ref = %q; want ns/env", got)
	}
	roots := []backends.MountedRoot{{Name: "work", Path: "/x"}}
	reg.remember(spec, backends.Status{Phase: backends.PhaseReady, Roots: roots})
	if got, ok := reg.Mounted("uid-1"); !ok || len(got) != 1 || got[0].Name != "work" {
		t.Fatalf("Mounted of a ready environment = %v, %v", got, ok)
	}
	reg.Forget("uid-1")
	if _, ok := reg.Mounted("uid-1"); ok || reg.Ref("uid-1") != "" {
		t.Fatal("the registry still knows a forgotten environment")
	}
}

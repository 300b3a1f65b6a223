package qemumicrovm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/loopdisk"
)

const baseDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

func diskBackend(t *testing.T, capacity int64) (*Backend, *os.File) {
	t.Helper()
	dir := t.TempDir()
	base, err := os.Create(filepath.Join(dir, "base.raw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	if _, err := base.WriteAt([]byte("ext4 superblock stand-in"), 1024); err != nil {
		t.Fatal(err)
	}
	if err := base.Truncate(32 << 20); err != nil {
		t.Fatal(err)
	}
	return &Backend{cfg: Config{Disks: loopdisk.NewPool(filepath.Join(dir, DisksDir), capacity)}}, base
}

// The record binds the working disk; a later boot uses it only while path, inode and
// base digest still hold. A swapped file, or a disk no record binds, is never booted.
func TestWorkingDiskBoundByTheRecord(t *testing.T) {
	b, base := diskBackend(t, 1<<30)
	f, ref, err := b.workingDisk("env-a", base, baseDigest, 48<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if ref.Size != 48<<20 || ref.BaseDigest != baseDigest || ref.Method == "" || ref.Ino == 0 {
		t.Fatalf("ref %+v", ref)
	}
	// The same record: the same disk, reused (what the guest wrote stays).
	f, again, err := b.workingDisk("env-a", base, baseDigest, 48<<20, ref)
	if err != nil || again.Ino != ref.Ino {
		t.Fatalf("reuse: %+v %v", again, err)
	}
	_ = f.Close()
	// Another base digest than the record's: refused.
	if _, _, err := b.workingDisk("env-a", base, strings.Replace(baseDigest, "1", "2", 1), 48<<20, ref); err == nil {
		t.Fatal("a disk cloned from another base was booted")
	}
	// A file swapped in at the disk's path: refused, and checkDisk says so too.
	p := b.cfg.Disks.Image("env-a")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.workingDisk("env-a", base, baseDigest, 48<<20, ref); err == nil || !strings.Contains(err.Error(), "not the one the record binds") {
		t.Fatalf("swapped disk: %v", err)
	}
	if checkDisk(ref) == nil {
		t.Fatal("checkDisk accepted a swapped disk")
	}
	// A disk no record binds (left by someone else): refused.
	if _, _, err := b.workingDisk("env-a", base, baseDigest, 48<<20, nil); err == nil {
		t.Fatal("an unbound disk was booted")
	}
}

// The node's reservation refuses a clone that would overcommit it (storage-exhausted);
// teardown deletes the disk unless the environment keeps it.
func TestWorkingDiskReservationAndTeardown(t *testing.T) {
	b, base := diskBackend(t, 80<<20)
	f, _, err := b.workingDisk("env-a", base, baseDigest, 48<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	_, _, err = b.workingDisk("env-b", base, baseDigest, 48<<20, nil)
	if actuation.CodeOf(err) != actuation.CodeStorageExhausted {
		t.Fatalf("second clone: %v, want %s", err, actuation.CodeStorageExhausted)
	}
	if left := b.deleteDisk("env-a", true); left != nil || !exists(b.cfg.Disks.Image("env-a")) {
		t.Fatalf("keep: %v", left)
	}
	if left := b.deleteDisk("env-a", false); left != nil || exists(b.cfg.Disks.Image("env-a")) {
		t.Fatalf("delete: %v", left)
	}
	if f, _, err := b.workingDisk("env-b", base, baseDigest, 48<<20, nil); err != nil {
		t.Fatalf("clone after the first disk was deleted: %v", err)
	} else {
		_ = f.Close()
	}
}

func TestGuestLimitsOnlyForDiskBoots(t *testing.T) {
	if got := guestLimits("console=ttyS0", nil, 64); got != "console=ttyS0" {
		t.Fatalf("minimal: %q", got)
	}
	if got := guestLimits("console=ttyS0", &DiskRef{}, 64); got != "console=ttyS0 workbench.pids=64" {
		t.Fatalf("full-system: %q", got)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

package environments

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/store"
)

// TestHostRootHasOneTenant claims a host directory for one environment in a real store,
// then refuses a second environment naming the same directory through a symlink (a string
// the webhook cannot match) with root-in-use; once the first record is deleted (teardown),
// the second claims it.
func TestHostRootHasOneTenant(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(base, "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	a := New(Deps{NodeName: "n1", Store: db, RootSharing: actuation.RootSharingNone})
	record := func(uid, name, path string) store.Environment {
		spec := backends.Spec{ID: uid, Ref: "ns/" + name, Roots: []backends.Root{{Name: "work", HostPath: path}}}
		return store.Environment{UID: uid, Namespace: "ns", Name: name, Backend: "host-local.v1",
			RootPaths: map[string]string{"work": path}, HostClaims: mergeClaims(nil, hostClaimsOf(spec))}
	}
	if code, msg, err := a.claimOrRefuse(record("uid-a", "a", dir)); err != nil || code != "" {
		t.Fatalf("first claim: %q %q %v", code, msg, err)
	}
	// Claiming again (a later pass of the same environment) is no conflict.
	if code, msg, err := a.claimOrRefuse(record("uid-a", "a", dir)); err != nil || code != "" {
		t.Fatalf("the holder's own second claim: %q %q %v", code, msg, err)
	}
	code, msg, err := a.claimOrRefuse(record("uid-b", "b", link))
	if err != nil || code != string(actuation.CodeRootInUse) || !strings.HasPrefix(msg, code+": ") {
		t.Fatalf("claim through a symlink to a held directory: %q %q %v; want %s", code, msg, err, actuation.CodeRootInUse)
	}
	if _, found, _ := db.Environments().Get("uid-b"); found {
		t.Fatal("a refused claim wrote its record")
	}
	if err := db.Environments().Delete("uid-a"); err != nil {
		t.Fatal(err)
	}
	if code, msg, err := a.claimOrRefuse(record("uid-b", "b", link)); err != nil || code != "" {
		t.Fatalf("claim after the holder's teardown: %q %q %v", code, msg, err)
	}
}

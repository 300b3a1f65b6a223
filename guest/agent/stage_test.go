package agent

import (
	"os"
	"path/filepath"
	"testing"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

func testAgent(t *testing.T) (*Agent, string) {
	t.Helper()
	root := t.TempDir()
	a, err := New(Config{Root: root, StateDir: t.TempDir(), Binding: func() (protocol.Binding, error) { return protocol.Binding{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a, root
}

// A create into a directory that does not exist makes its parents beneath the root.
func TestMkdirParentsMakesMissingDirectories(t *testing.T) {
	a, root := testAgent(t)
	if err := a.mkdirParents("out/deep/er"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(root, "out/deep/er")); err != nil || !fi.IsDir() {
		t.Fatalf("out/deep/er: %v", err)
	}
	if err := a.mkdirParents("out/deep"); err != nil {
		t.Fatalf("existing parents: %v", err)
	}
}

// A link on the way (to a directory outside the root, or anywhere) is never followed: no
// directory is made outside the root.
func TestMkdirParentsRefusesLinks(t *testing.T) {
	a, root := testAgent(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	err := a.mkdirParents("link/made")
	if err == nil {
		t.Fatal("mkdirParents followed a link")
	}
	if c := actuation.CodeOf(err); c != actuation.CodeSymlinkEscape && c != actuation.CodeNotDirectory {
		t.Fatalf("code %q (%v)", c, err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "made")); !os.IsNotExist(err) {
		t.Fatalf("a directory was made outside the root: %v", err)
	}
	if err := a.mkdirParents("a/../../x"); actuation.CodeOf(err) != actuation.CodeSymlinkEscape {
		t.Fatalf("dot-dot: %v", err)
	}
}

package fsaccess

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCreatedFilesBelongToRootOwner: beneath a root owned by an unprivileged uid/gid,
// what the (root) agent creates — an atomic write, a replacement, directories — belongs
// to that uid/gid; beneath a root-owned root it stays root's.
func TestCreatedFilesBelongToRootOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root (as the agent and CI run)")
	}
	const uid, gid = 1234, 5678
	for _, tc := range []struct {
		name     string
		uid, gid int
	}{{"owned", uid, gid}, {"root", 0, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chown(dir, tc.uid, tc.gid); err != nil {
				t.Fatal(err)
			}
			r, err := OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = r.Close() }()
			if _, err := r.MkdirAll("a/b", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := r.CreateFileAtomic("a/b/new.txt", []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "old.txt"), []byte("o"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := r.WriteFileAtomic("old.txt", []byte("n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"a", "a/b", "a/b/new.txt", "old.txt"} {
				var st unix.Stat_t
				if err := unix.Lstat(filepath.Join(dir, p), &st); err != nil {
					t.Fatal(err)
				}
				if int(st.Uid) != tc.uid || int(st.Gid) != tc.gid {
					t.Errorf("%s is %d:%d, want %d:%d", p, st.Uid, st.Gid, tc.uid, tc.gid)
				}
			}
		})
	}
}

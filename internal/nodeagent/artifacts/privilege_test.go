package artifacts

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestArtifactCarriesNoPrivilege (issue 25 item 1): an artifact is its content only. A
// produced file with setuid, setgid and a file capability is stored as a fresh read-only
// blob (mode 0444, no extended attribute), so nothing downloaded or restored from the
// store carries them.
func TestArtifactCarriesNoPrivilege(t *testing.T) {
	s, dir := store(t)
	src := filepath.Join(t.TempDir(), "tool")
	must(t, os.WriteFile(src, []byte("#!/bin/sh\nid\n"), 0o755))
	must(t, unix.Chmod(src, 0o6755))
	if os.Getuid() == 0 {
		must(t, unix.Setxattr(src, "security.capability", []byte{1, 0, 0, 2, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0))
	}
	f, err := os.Open(src)
	must(t, err)
	digest, _, err := s.Put(f, 1<<20)
	_ = f.Close()
	must(t, err)
	blobs := 0
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		must(t, err)
		if d.IsDir() {
			return nil
		}
		blobs++
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		if st.Mode&0o7777 != 0o444 {
			t.Errorf("blob %s has mode %#o, want 0444", p, st.Mode&0o7777)
		}
		if _, err := unix.Lgetxattr(p, "security.capability", nil); !errors.Is(err, unix.ENODATA) {
			t.Errorf("blob %s: security.capability present (%v)", p, err)
		}
		return nil
	}))
	if blobs != 1 {
		t.Fatalf("%d blobs stored for %s", blobs, digest)
	}
}

package fsaccess

import (
	"os"
	"path/filepath"
	"testing"
)

// mapCache is a DigestCache that trusts every key.
type mapCache map[FileKey]string

func (m mapCache) Digest(k FileKey) (string, bool) { d, ok := m[k]; return d, ok }
func (m mapCache) Put(k FileKey, d string)         { m[k] = d }

// TestSnapshotCachedReusesAndStores: a file read by a cached snapshot is stored under its
// key with the digest the uncached snapshot computes; a second snapshot takes the digest
// from the cache (the file is not read again: a digest planted under its key comes back);
// a file changed since has another key and is read again.
func TestSnapshotCachedReusesAndStores(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha\n"), 0o644))
	r, err := OpenRoot(dir)
	must(t, err)
	t.Cleanup(func() { _ = r.Close() })
	digestOf := func(s *Snapshot, path string) string {
		t.Helper()
		for _, e := range s.Entries {
			if e.Path == path {
				return e.Digest
			}
		}
		t.Fatalf("%s not in the snapshot %+v", path, s.Entries)
		return ""
	}
	plain, err := r.Snapshot("", SnapshotLimits{})
	must(t, err)
	c := mapCache{}
	cached, err := r.SnapshotCached("", SnapshotLimits{}, c)
	must(t, err)
	if want := digestOf(plain, "a.txt"); digestOf(cached, "a.txt") != want || want != DigestBytes([]byte("alpha\n")) {
		t.Fatalf("cached snapshot digest %q, uncached %q", digestOf(cached, "a.txt"), want)
	}
	if len(c) != 1 {
		t.Fatalf("the cache holds %d digests after one file was read, want 1", len(c))
	}
	for k := range c {
		c[k] = "planted"
	}
	again, err := r.SnapshotCached("", SnapshotLimits{}, c)
	must(t, err)
	if got := digestOf(again, "a.txt"); got != "planted" {
		t.Fatalf("the second snapshot read the file again (digest %q), want the cached one", got)
	}
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha, longer\n"), 0o644))
	changed, err := r.SnapshotCached("", SnapshotLimits{}, c)
	must(t, err)
	if got := digestOf(changed, "a.txt"); got != DigestBytes([]byte("alpha, longer\n")) {
		t.Fatalf("a changed file kept digest %q", got)
	}
}

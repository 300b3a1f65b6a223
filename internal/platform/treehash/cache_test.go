package treehash

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

func openRoot(t testing.TB, dir string) *fsaccess.Root {
	t.Helper()
	r, err := fsaccess.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// agedCache is a cache whose clock runs an hour ahead, so that files written by the test
// moments ago are outside the racy window (the test does not sleep).
func agedCache() *Cache {
	c := NewCache(0)
	c.now = func() time.Time { return time.Now().Add(time.Hour) }
	return c
}

func cachedState(t *testing.T, r *fsaccess.Root, c *Cache, lim Limits) *State {
	t.Helper()
	s, err := HashHostRootsCached(map[string]*fsaccess.Root{"repo": r}, lim, map[string]*Cache{"repo": c})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func coldState(t *testing.T, dir string) *State {
	t.Helper()
	return mustState(t, map[string]string{"repo": dir})
}

// The incremental state equals a cold one after every kind of change, and re-reads only
// what changed: a rewrite of the same size with the old mtime restored, a chmod, a
// rename, a delete, a new file, a file replaced by a symlink.
func TestIncrementalEqualsColdAfterEveryChange(t *testing.T) {
	dir := tree(t)
	for i := range 40 {
		write(t, dir, fmt.Sprintf("pkg/f%02d.txt", i), fmt.Sprintf("file %02d\n", i), 0o644)
	}
	r := openRoot(t, dir)
	c := agedCache()
	first := cachedState(t, r, c, Limits{})
	if first.Digest != coldState(t, dir).Digest {
		t.Fatal("first cached state differs from the cold state")
	}
	if st := c.Stats(); st.Hits != 0 || st.Stored != 43 {
		t.Fatalf("first state: %+v, want 0 hits and 43 stored", st)
	}
	mtime := time.Now().Add(-time.Hour)
	edits := []struct {
		name   string
		do     func()
		reread int // files read again
	}{
		{"same size, mtime restored", func() {
			p := filepath.Join(dir, "pkg/f07.txt")
			must(t, os.WriteFile(p, []byte("FILE 07\n"), 0o644))
			must(t, os.Chtimes(p, mtime, mtime))
		}, 1},
		{"chmod", func() { must(t, os.Chmod(filepath.Join(dir, "pkg/f08.txt"), 0o600)) }, 1},
		{"rename", func() { must(t, os.Rename(filepath.Join(dir, "pkg/f09.txt"), filepath.Join(dir, "pkg/g09.txt"))) }, 1},
		{"delete", func() { must(t, os.Remove(filepath.Join(dir, "pkg/f10.txt"))) }, 0},
		{"new file", func() { write(t, dir, "pkg/new.txt", "new\n", 0o644) }, 1},
		{"file to symlink", func() {
			must(t, os.Remove(filepath.Join(dir, "pkg/f11.txt")))
			must(t, os.Symlink("f12.txt", filepath.Join(dir, "pkg/f11.txt")))
		}, 0},
		{"nothing", func() {}, 0},
	}
	prev := first.Digest
	for _, e := range edits {
		before := c.Stats()
		e.do()
		got := cachedState(t, r, c, Limits{})
		want := coldState(t, dir)
		if got.Digest != want.Digest {
			t.Fatalf("%s: incremental %s, cold %s", e.name, got.Digest, want.Digest)
		}
		if (e.name == "nothing") != (got.Digest == prev) {
			t.Fatalf("%s: digest changed=%v", e.name, got.Digest != prev)
		}
		after := c.Stats()
		if reread := after.Misses - before.Misses; reread != e.reread {
			t.Fatalf("%s: re-read %d files, want %d", e.name, reread, e.reread)
		}
		prev = got.Digest
	}
	// The cache holds only the files of the last state.
	files := 0
	for _, e := range coldState(t, dir).Entries {
		if e.Type == TypeFile {
			files++
		}
	}
	if c.Len() != files {
		t.Fatalf("cache holds %d digests, the tree %d files", c.Len(), files)
	}
}

// A file written within the racy window is not remembered: a second write in the same
// timestamp tick (same size, mtime and ctime possible) is still seen.
func TestRacyFilesAreNotCached(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "hot.txt", "one\n", 0o644)
	r := openRoot(t, dir)
	c := NewCache(0) // the real clock: the file is seconds old at most
	cachedState(t, r, c, Limits{})
	if st := c.Stats(); st.Stored != 0 {
		t.Fatalf("a file changed within %s was cached: %+v", RacyWindow, st)
	}
	write(t, dir, "hot.txt", "two\n", 0o644)
	if cachedState(t, r, c, Limits{}).Digest != coldState(t, dir).Digest {
		t.Fatal("a racy rewrite was missed")
	}
}

// A new boot id empties the cache: nothing cached before is trusted.
func TestCacheNotTrustedAcrossBoot(t *testing.T) {
	dir := tree(t)
	boot := filepath.Join(t.TempDir(), "boot_id")
	must(t, os.WriteFile(boot, []byte("boot-1\n"), 0o644))
	old := bootIDFile
	bootIDFile = boot
	t.Cleanup(func() { bootIDFile = old })
	r := openRoot(t, dir)
	c := agedCache()
	cachedState(t, r, c, Limits{})
	cachedState(t, r, c, Limits{})
	if st := c.Stats(); st.Hits != 3 || st.Flushes != 0 {
		t.Fatalf("same boot: %+v", st)
	}
	must(t, os.WriteFile(boot, []byte("boot-2\n"), 0o644))
	before := c.Stats()
	cachedState(t, r, c, Limits{})
	st := c.Stats()
	if st.Flushes != 1 || st.Hits != before.Hits || st.Misses-before.Misses != 3 {
		t.Fatalf("after a new boot id the cache must be emptied and every file re-read: %+v -> %+v", before, st)
	}
	// An unreadable boot id: never cached.
	bootIDFile = filepath.Join(t.TempDir(), "absent")
	cachedState(t, r, c, Limits{})
	cachedState(t, r, c, Limits{})
	if got := c.Stats(); got.Hits != st.Hits {
		t.Fatalf("without a boot id the cache must not be used: %+v", got)
	}
}

// A remount empties the cache: a new filesystem at the same path with a file of the same
// name, size and times is read again.
func TestCacheNotTrustedAcrossRemount(t *testing.T) {
	mnt := t.TempDir()
	mount := func() {
		if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m"); err != nil {
			if errors.Is(err, unix.EPERM) {
				t.Skip("mounting a tmpfs needs CAP_SYS_ADMIN: " + err.Error())
			}
			t.Fatal(err)
		}
	}
	mount()
	stamp := time.Now().Add(-time.Hour).Truncate(time.Second)
	fill := func(content string) {
		p := filepath.Join(mnt, "f.txt")
		must(t, os.WriteFile(p, []byte(content), 0o644))
		must(t, os.Chtimes(p, stamp, stamp))
	}
	fill("AAAA\n")
	c := agedCache()
	r1, err := fsaccess.OpenRoot(mnt)
	must(t, err)
	s1 := cachedState(t, r1, c, Limits{})
	_ = r1.Close()
	must(t, unix.Unmount(mnt, 0))
	mount()
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	fill("BBBB\n")
	r2, err := fsaccess.OpenRoot(mnt)
	must(t, err)
	defer func() { _ = r2.Close() }()
	before := c.Stats()
	s2 := cachedState(t, r2, c, Limits{})
	if st := c.Stats(); st.Flushes != before.Flushes+1 || st.Hits != before.Hits {
		t.Fatalf("a remount must empty the cache: %+v -> %+v", before, st)
	}
	if s1.Digest == s2.Digest {
		t.Fatal("different content on the new mount hashed equal")
	}
}

// Operator caps: above the ceiling refused with state-limit-invalid; a raised cap admits
// a tree the default refuses.
func TestOperatorCaps(t *testing.T) {
	if err := (Limits{MaxEntries: CeilingMaxEntries + 1}).Check(); actuation.CodeOf(err) != actuation.CodeStateLimitInvalid {
		t.Fatalf("over-ceiling maxEntries: %v", err)
	}
	if err := (Limits{MaxBytes: CeilingMaxBytes + 1}).Check(); actuation.CodeOf(err) != actuation.CodeStateLimitInvalid {
		t.Fatalf("over-ceiling maxBytes: %v", err)
	}
	if err := (Limits{MaxFile: CeilingMaxFile + 1}).Check(); actuation.CodeOf(err) != actuation.CodeStateLimitInvalid {
		t.Fatalf("over-ceiling maxFileBytes: %v", err)
	}
	dir := tree(t)
	r := openRoot(t, dir)
	_, err := HashHostRootsCached(map[string]*fsaccess.Root{"repo": r}, Limits{MaxEntries: 3}, nil)
	if actuation.CodeOf(err) != actuation.CodeStateTreeTooLarge {
		t.Fatalf("3-entry cap on a 6-entry tree: %v", err)
	}
	if _, err := HashHostRootsCached(map[string]*fsaccess.Root{"repo": r}, Limits{MaxEntries: 6}, nil); err != nil {
		t.Fatalf("6-entry cap on a 6-entry tree: %v", err)
	}
	if _, err := HashHostRootsCached(map[string]*fsaccess.Root{"repo": r}, Limits{MaxBytes: 10}, nil); actuation.CodeOf(err) != actuation.CodeStateTreeTooLarge {
		t.Fatalf("10-byte cap: %v", err)
	}
}

// BenchmarkEdge50k measures one edge's state on a 50,000-file tree with one file changed:
// incremental (this cache), full (every file re-read, the state hash before issue 30) and
// the floor, `sha256sum` over every file of the same tree (page cache warm, as for the
// others). Run: go test ./internal/platform/treehash -run '^$' -bench Edge50k -benchtime 5x
func BenchmarkEdge50k(b *testing.B) {
	dir := b.TempDir()
	const files, perDir = 50_000, 100
	buf := make([]byte, 1024)
	for i := range files {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i/perDir))
		if i%perDir == 0 {
			must(b, os.MkdirAll(d, 0o755))
		}
		copy(buf, fmt.Sprintf("file %d\n", i))
		must(b, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d.txt", i%perDir)), buf, 0o644))
	}
	time.Sleep(RacyWindow + 100*time.Millisecond) // the tree is older than the racy window, as a checked-out repository is
	lim := Limits{MaxEntries: 60_000}
	r := openRoot(b, dir)
	roots := map[string]*fsaccess.Root{"repo": r}
	edit := func(i int) {
		must(b, os.WriteFile(filepath.Join(dir, "d000", "f000.txt"), fmt.Appendf(nil, "edit %d\n", i), 0o644))
	}
	b.Run("incremental", func(b *testing.B) {
		c := NewCache(0)
		caches := map[string]*Cache{"repo": c}
		if _, err := HashHostRootsCached(roots, lim, caches); err != nil { // the recording's first state
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			edit(i)
			b.StartTimer()
			if _, err := HashHostRootsCached(roots, lim, caches); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if st := c.Stats(); st.Misses > 2*b.N+files {
			b.Fatalf("re-read too much: %+v", st)
		}
	})
	b.Run("full", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			edit(i)
			b.StartTimer()
			if _, err := HashHostRootsCached(roots, lim, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sha256sum", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cmd := exec.Command("sh", "-c", "find . -type f -print0 | xargs -0 sha256sum >/dev/null")
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
}

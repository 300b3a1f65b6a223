package treehash

import (
	"os"
	"strings"
	"sync"
	"time"

	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// RacyWindow is how recent a file's mtime or ctime may be for its digest to be
// cached: a file changed within the filesystem's timestamp granularity of the
// moment it was read could change again without moving its times, so it is
// re-read at the next state (git's "racily clean" rule, with a wide margin).
const RacyWindow = 2 * time.Second

// bootIDFile identifies the running kernel's boot.
var bootIDFile = "/proc/sys/kernel/random/boot_id"

// BootID returns the kernel's boot id ("" when it cannot be read).
func BootID() string {
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Cache is the incremental state hash's memory of one root: content digests
// by fsaccess.FileKey (device, inode, size, mtime, ctime), so that a state
// re-reads only files changed since the previous one. It is never trusted
// across a boot (boot_id) or a remount (st_dev or mount id of the root): either
// empties it. After each complete state it keeps only the files that state
// saw, so it never holds more entries than the tree (and at most max).
type Cache struct {
	mu      sync.Mutex
	max     int
	boot    string
	mount   fsaccess.MountIdentity
	gen     uint64
	entries map[fsaccess.FileKey]cached
	now     func() time.Time
	stats   CacheStats
}

type cached struct {
	digest string
	gen    uint64
}

// CacheStats count what the cache did (for tests and benchmarks).
type CacheStats struct {
	Hits, Misses, Stored, Flushes int
}

// NewCache returns an empty cache holding at most max digests (max <= 0:
// CeilingMaxEntries).
func NewCache(max int) *Cache {
	if max <= 0 {
		max = CeilingMaxEntries
	}
	return &Cache{max: max, entries: map[fsaccess.FileKey]cached{}, now: time.Now}
}

// Stats returns the counters so far.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Len is the number of digests held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// begin validates the cache for a state of a root on mount mnt taken in boot
// boot, emptying it when either changed or is unknown, and starts a generation.
func (c *Cache) begin(boot string, mnt fsaccess.MountIdentity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if boot == "" || boot != c.boot || mnt != c.mount {
		if len(c.entries) > 0 {
			c.stats.Flushes++
		}
		c.entries = map[fsaccess.FileKey]cached{}
		c.boot, c.mount = boot, mnt
	}
	c.gen++
}

// end drops the digests the finished state did not see (deleted or changed files).
func (c *Cache) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.entries {
		if v.gen != c.gen {
			delete(c.entries, k)
		}
	}
}

// Digest implements fsaccess.DigestCache.
func (c *Cache) Digest(k fsaccess.FileKey) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.entries[k]
	if !ok {
		c.stats.Misses++
		return "", false
	}
	v.gen = c.gen
	c.entries[k] = v
	c.stats.Hits++
	return v.digest, true
}

// Put implements fsaccess.DigestCache: a file whose mtime or ctime lies within
// RacyWindow of now (or in the future) is not remembered.
func (c *Cache) Put(k fsaccess.FileKey, digest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.boot == "" || len(c.entries) >= c.max {
		return
	}
	limit := c.now().Add(-RacyWindow).UnixNano()
	if k.MtimeNs >= limit || k.CtimeNs >= limit {
		return
	}
	c.entries[k] = cached{digest: digest, gen: c.gen}
	c.stats.Stored++
}

// SnapshotRoot takes the snapshot of a host root for a state with lim,
// re-reading only files the cache does not know (c nil: every file).
func SnapshotRoot(root *fsaccess.Root, lim Limits, c *Cache) (*fsaccess.Snapshot, error) {
	if c == nil {
		return root.Snapshot("", lim.SnapshotLimits())
	}
	mnt, err := root.MountIdentity()
	if err != nil {
		return nil, err
	}
	c.begin(BootID(), mnt)
	s, err := root.SnapshotCached("", lim.SnapshotLimits(), c)
	if err != nil {
		return nil, err
	}
	if !s.Truncated {
		c.end()
	}
	return s, nil
}

// HashHostRootsCached is HashHostRoots with one cache per root name (a nil or
// missing cache: that root is read in full).
func HashHostRootsCached(roots map[string]*fsaccess.Root, lim Limits, caches map[string]*Cache) (*State, error) {
	if err := lim.Check(); err != nil {
		return nil, err
	}
	snaps := make([]NamedSnapshot, 0, len(roots))
	for name, r := range roots {
		s, err := SnapshotRoot(r, lim, caches[name])
		if err != nil {
			return nil, err
		}
		snaps = append(snaps, NamedSnapshot{Name: name, Snapshot: s})
	}
	return FromSnapshots(snaps, lim)
}

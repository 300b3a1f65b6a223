package fsaccess

import (
	"io"

	"golang.org/x/sys/unix"
)

// Snapshot caps (defaults used when a limit is <= 0).
const (
	DefaultMaxFileBytesToHash  = 16 << 20  // larger files: DigestOmitted="over-file-cap"
	DefaultMaxTotalBytesToHash = 256 << 20 // after this budget: DigestOmitted="over-total-cap"
)

// SnapshotLimits bound a Snapshot.
type SnapshotLimits struct {
	MaxEntries          int   // default DefaultMaxEntries (10,000)
	MaxDepth            int   // default DefaultMaxDepth (32)
	MaxFileBytesToHash  int64 // default 16 MiB
	MaxTotalBytesToHash int64 // default 256 MiB
}

// Snapshot is a metadata observation of a subtree: names, types, sizes, modes,
// times and digests. It grants no byte reads.
type Snapshot struct {
	Root        string   `json:"root"`
	Entries     []Entry  `json:"entries"`
	Truncated   bool     `json:"truncated"`
	TruncatedBy []string `json:"truncatedBy,omitempty"`
}

// Snapshot walks rel ("" = the root) with Walk and hashes regular files up to
// the caps (streaming, never whole-file buffering).
func (r *Root) Snapshot(rel string, lim SnapshotLimits) (*Snapshot, error) {
	return r.snapshot(rel, lim, nil)
}

// snapshot is Snapshot, with the digests of c (nil: none) reused and the stable ones read
// now stored in it.
func (r *Root) snapshot(rel string, lim SnapshotLimits, c DigestCache) (*Snapshot, error) {
	lim = lim.WithDefaults()
	snap := &Snapshot{Root: rel, Entries: []Entry{}}
	budget := lim.MaxTotalBytesToHash
	res, err := r.Walk(rel, WalkLimits{MaxEntries: lim.MaxEntries, MaxDepth: lim.MaxDepth}, func(w *WalkEntry) error {
		e := w.Entry
		if e.Type != TypeFile {
			snap.Entries = append(snap.Entries, e)
			return nil
		}
		var key *FileKey
		if c != nil {
			key = &FileKey{Dev: w.dev, Ino: w.ino, Size: e.Size, MtimeNs: e.ModTime.UnixNano(), CtimeNs: w.ctime}
			if d, ok := c.Digest(*key); ok {
				e.Digest = d
				snap.Entries = append(snap.Entries, e)
				return nil
			}
		}
		if e.DigestOmitted = lim.DigestOmission(e.Size, &budget); e.DigestOmitted == "" {
			var stable bool
			e.Digest, e.DigestOmitted, stable = hashEntry(w, lim.MaxFileBytesToHash, key)
			if c != nil && e.Digest != "" && stable {
				c.Put(*key, e.Digest)
			}
		}
		snap.Entries = append(snap.Entries, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	snap.Truncated, snap.TruncatedBy = res.Truncated, res.TruncatedBy
	return snap, nil
}

// hashEntry hashes a regular file (at most max bytes) and, when key is set, reports
// whether an fstat after the read still matches it (stable).
func hashEntry(w *WalkEntry, max int64, key *FileKey) (digest, omitted string, stable bool) {
	f, err := w.Open()
	if err != nil {
		return "", "unreadable", false
	}
	defer func() { _ = f.Close() }()
	d := NewDigester()
	n, err := io.Copy(d, io.LimitReader(f, max+1))
	if err != nil {
		return "", "unreadable", false
	}
	if n != w.Size {
		return "", "changed-during-read", false
	}
	if key == nil {
		return d.Digest(), "", false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return d.Digest(), "", false
	}
	return d.Digest(), "", fileKeyOf(&st) == *key
}

package fsaccess

import (
	"io"

	"golang.org/x/sys/unix"
)

// FileKey identifies one version of a regular file as stat sees it: device,
// inode, size, modification and status-change times. Any write, truncation,
// rename over the file, chmod or chown moves ctime, so a file whose key is
// unchanged has unchanged content unless the change happened within the
// filesystem's timestamp granularity of the moment the key was taken (the
// "racy" window a DigestCache must not trust).
type FileKey struct {
	Dev, Ino         uint64
	Size             int64
	MtimeNs, CtimeNs int64
}

// DigestCache remembers content digests by FileKey. Implementations bound
// their size and decide which keys are too recent to trust.
type DigestCache interface {
	// Digest returns the digest stored for k, if any.
	Digest(k FileKey) (string, bool)
	// Put stores the digest of a file whose content was read under key k.
	Put(k FileKey, digest string)
}

// SnapshotCached is Snapshot with a content-digest cache: a regular file whose
// FileKey is in c is not read again. A file read now is stored in c only when
// an fstat after the read still gives the key the walk saw (the file did not
// change while it was read). The caps apply to the bytes actually read.
func (r *Root) SnapshotCached(rel string, lim SnapshotLimits, c DigestCache) (*Snapshot, error) {
	if c == nil {
		return r.Snapshot(rel, lim)
	}
	lim = lim.WithDefaults()
	snap := &Snapshot{Root: rel, Entries: []Entry{}}
	budget := lim.MaxTotalBytesToHash
	res, err := r.Walk(rel, WalkLimits{MaxEntries: lim.MaxEntries, MaxDepth: lim.MaxDepth}, func(w *WalkEntry) error {
		e := w.Entry
		if e.Type == TypeFile {
			key := FileKey{Dev: w.dev, Ino: w.ino, Size: e.Size, MtimeNs: e.ModTime.UnixNano(), CtimeNs: w.ctime}
			if d, ok := c.Digest(key); ok {
				e.Digest = d
			} else if e.DigestOmitted = lim.DigestOmission(e.Size, &budget); e.DigestOmitted == "" {
				var stable bool
				e.Digest, e.DigestOmitted, stable = hashEntryKeyed(w, lim.MaxFileBytesToHash, key)
				if e.Digest != "" && stable {
					c.Put(key, e.Digest)
				}
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

// hashEntryKeyed hashes a file like hashEntry and reports whether an fstat
// after the read still matches key.
func hashEntryKeyed(w *WalkEntry, max int64, key FileKey) (digest, omitted string, stable bool) {
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
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return d.Digest(), "", false
	}
	after := fileKeyOf(&st)
	return d.Digest(), "", after == key
}

// MountIdentity identifies the filesystem mount a root lives on: st_dev and the
// kernel's mount id — the unique 64-bit one (statx STATX_MNT_ID_UNIQUE, Linux
// 6.8+) where reported, which no later mount reuses, else the reusable
// STATX_MNT_ID (5.8+). A remount, or another filesystem mounted at the same
// place, changes it; with only the reusable id or none, st_dev and the reusable
// id can repeat after an unmount, and FileKey's ctime is what still tells.
type MountIdentity struct {
	Dev      uint64
	MountID  uint64
	UniqueID bool // MountID is the never-reused id
}

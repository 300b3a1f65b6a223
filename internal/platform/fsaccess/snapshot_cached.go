package fsaccess

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
	return r.snapshot(rel, lim, c)
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

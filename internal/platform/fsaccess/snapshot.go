package fsaccess

import (
	"io"
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
	lim = lim.WithDefaults()
	snap := &Snapshot{Root: rel, Entries: []Entry{}}
	budget := lim.MaxTotalBytesToHash
	res, err := r.Walk(rel, WalkLimits{MaxEntries: lim.MaxEntries, MaxDepth: lim.MaxDepth}, func(w *WalkEntry) error {
		e := w.Entry
		if e.Type == TypeFile {
			if e.DigestOmitted = lim.DigestOmission(e.Size, &budget); e.DigestOmitted == "" {
				e.Digest, e.DigestOmitted = hashEntry(w, lim.MaxFileBytesToHash)
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

func hashEntry(w *WalkEntry, max int64) (digest, omitted string) {
	f, err := w.Open()
	if err != nil {
		return "", "unreadable"
	}
	defer func() { _ = f.Close() }()
	d := NewDigester()
	n, err := io.Copy(d, io.LimitReader(f, max+1))
	if err != nil {
		return "", "unreadable"
	}
	if n != w.Size {
		return "", "changed-during-read"
	}
	return d.Digest(), ""
}

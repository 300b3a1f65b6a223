// Package treehash computes the workspace state hash of seed 004: a Merkle
// digest over the tree of an environment's roots. A regular file contributes
// its content digest, a symlink the digest of its target, a directory the
// digest of its sorted children (name, type, permission bits, digest); the
// state of several roots is the digest of their sorted (name, digest) pairs.
// Modification times, owners and inode numbers never enter the hash, so two
// copies of the same tree hash equal wherever they live (host directory or VM
// guest).
//
// The walk itself is fsaccess's (openat2, RESOLVE_BENEATH, no symlink
// following) or a guest's snapshot of the same shape; this package turns a
// bounded snapshot into a digest and refuses, with CodeTreeTooLarge, a tree
// whose snapshot hit a cap or left a file unhashed: a partial hash would claim
// a state it did not see. It has no Kubernetes imports.
package treehash

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/gowebpki/jcs"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Caps (defaults used when a limit is <= 0). An operator raises or lowers them per
// Environment (spec.recording) up to the ceilings; Limits.Check refuses a value above one.
const (
	DefaultMaxEntries = 65_536  // entries per state (all roots together)
	DefaultMaxBytes   = 1 << 30 // file bytes per state
	DefaultMaxFile    = 64 << 20

	CeilingMaxEntries = 1_000_000
	CeilingMaxBytes   = 64 << 30
	CeilingMaxFile    = 4 << 30
)

// Check refuses a limit above its ceiling (state-limit-invalid).
func (l Limits) Check() error {
	switch {
	case l.MaxEntries > CeilingMaxEntries:
		return actuation.Refusef(actuation.CodeStateLimitInvalid, "maxEntries %d is above the ceiling %d", l.MaxEntries, CeilingMaxEntries)
	case l.MaxBytes > CeilingMaxBytes:
		return actuation.Refusef(actuation.CodeStateLimitInvalid, "maxBytes %d is above the ceiling %d", l.MaxBytes, int64(CeilingMaxBytes))
	case l.MaxFile > CeilingMaxFile:
		return actuation.Refusef(actuation.CodeStateLimitInvalid, "maxFileBytes %d is above the ceiling %d", l.MaxFile, int64(CeilingMaxFile))
	}
	return nil
}

// Effective returns the limits with defaults filled in.
func (l Limits) Effective() Limits { return l.withDefaults() }

// Limits bound one state computation.
type Limits struct {
	MaxEntries int
	MaxBytes   int64
	MaxFile    int64
}

func (l Limits) withDefaults() Limits {
	l.MaxEntries = actuation.OrDefault(l.MaxEntries, DefaultMaxEntries)
	l.MaxBytes = actuation.OrDefault(l.MaxBytes, DefaultMaxBytes)
	l.MaxFile = actuation.OrDefault(l.MaxFile, DefaultMaxFile)
	return l
}

// SnapshotLimits returns the fsaccess limits a snapshot for this state must be
// taken with: one entry more than the cap, so that reaching the cap is seen.
func (l Limits) SnapshotLimits() fsaccess.SnapshotLimits {
	l = l.withDefaults()
	return fsaccess.SnapshotLimits{
		MaxEntries:          l.MaxEntries + 1,
		MaxFileBytesToHash:  l.MaxFile,
		MaxTotalBytesToHash: l.MaxBytes,
	}
}

// Entry types.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeOther   = "other"
)

// Entry is one node of a state: Path is "<root>/<relative path>" ("<root>"
// alone for a root), Mode the permission bits (0o7777), Digest the content
// digest of a file, the target digest of a symlink or the Merkle digest of a
// directory.
type Entry struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Mode   uint32 `json:"mode"`
	Digest string `json:"digest"`
	Size   int64  `json:"size,omitempty"`
}

// Root is the tree of one named root.
type Root struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// State is the workspace state of an environment: its digest, the digest of
// each root and every entry (sorted by path).
type State struct {
	Digest  string  `json:"digest"`
	Roots   []Root  `json:"roots"`
	Entries []Entry `json:"entries"`
}

// refuse is the state-tree-too-large refusal (one refusal type: actuation.Refusal).
func refuse(format string, args ...any) error {
	return actuation.Refusef(actuation.CodeStateTreeTooLarge, format, args...)
}

// NamedSnapshot is the snapshot of one root ("" path) taken with
// Limits.SnapshotLimits.
type NamedSnapshot struct {
	Name     string
	Snapshot *fsaccess.Snapshot
}

// FromSnapshots computes the state of the given roots. It refuses a snapshot
// that was truncated, or left a regular file unhashed, or that together with
// the others exceeds lim.
func FromSnapshots(roots []NamedSnapshot, lim Limits) (*State, error) {
	lim = lim.withDefaults()
	st := &State{Roots: []Root{}, Entries: []Entry{}}
	total, bytes := 0, int64(0)
	sorted := slices.Clone(roots)
	slices.SortFunc(sorted, func(a, b NamedSnapshot) int { return strings.Compare(a.Name, b.Name) })
	for i, r := range sorted {
		if i > 0 && sorted[i-1].Name == r.Name {
			return nil, fmt.Errorf("treehash: root %q given twice", r.Name)
		}
		if r.Snapshot == nil {
			return nil, fmt.Errorf("treehash: root %q has no snapshot", r.Name)
		}
		if r.Snapshot.Truncated {
			return nil, refuse("root %q: the tree exceeds a cap (%s; maxEntries %d): raise the Environment's spec.recording.maxEntries (ceiling %d) or record a smaller root", r.Name, strings.Join(r.Snapshot.TruncatedBy, ","), lim.MaxEntries, CeilingMaxEntries)
		}
		entries := make([]Entry, 0, len(r.Snapshot.Entries))
		for _, e := range r.Snapshot.Entries {
			te, err := fromFS(e)
			if err != nil {
				return nil, fmt.Errorf("treehash: root %q: %w", r.Name, err)
			}
			bytes += te.Size
			entries = append(entries, te)
		}
		total += len(entries)
		if total > lim.MaxEntries {
			return nil, refuse("the roots hold more than maxEntries %d entries (spec.recording.maxEntries, ceiling %d)", lim.MaxEntries, CeilingMaxEntries)
		}
		if bytes > lim.MaxBytes {
			return nil, refuse("the roots hold more than maxBytes %d file bytes (spec.recording.maxBytes, ceiling %d)", lim.MaxBytes, int64(CeilingMaxBytes))
		}
		digest, all, err := merkle(r.Name, entries)
		if err != nil {
			return nil, err
		}
		st.Roots = append(st.Roots, Root{Name: r.Name, Digest: digest})
		st.Entries = append(st.Entries, all...)
	}
	d, err := StateDigest(st.Roots)
	if err != nil {
		return nil, err
	}
	st.Digest = d
	return st, nil
}

func fromFS(e fsaccess.Entry) (Entry, error) {
	out := Entry{Path: e.Path, Mode: uint32(e.Mode.Perm()) | specialBits(e.Mode)}
	switch e.Type {
	case fsaccess.TypeFile:
		if e.Digest == "" {
			return out, refuse("file %q was not hashed (%s; spec.recording.maxFileBytes and maxBytes cap it)", e.Path, e.DigestOmitted)
		}
		out.Type, out.Digest, out.Size = TypeFile, e.Digest, e.Size
	case fsaccess.TypeDir:
		out.Type = TypeDir
	case fsaccess.TypeSymlink:
		out.Type, out.Digest = TypeSymlink, digestBytes([]byte(e.LinkTarget))
	default:
		out.Type, out.Digest = TypeOther, digestBytes(nil)
	}
	return out, nil
}

func specialBits(m fs.FileMode) uint32 {
	var b uint32
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

// child is the hashed form of one directory entry.
type child struct {
	Name   string `json:"n"`
	Type   string `json:"t"`
	Mode   uint32 `json:"m"`
	Digest string `json:"d"`
}

// merkle fills directory digests bottom-up and returns the root digest and the
// entries with paths prefixed by the root name (the root itself included).
func merkle(rootName string, entries []Entry) (string, []Entry, error) {
	children := map[string][]child{"": {}}
	byPath := make(map[string]int, len(entries))
	for i, e := range entries {
		if _, dup := byPath[e.Path]; dup {
			return "", nil, fmt.Errorf("treehash: root %q: entry %q listed twice", rootName, e.Path)
		}
		byPath[e.Path] = i
		if e.Type == TypeDir {
			if _, ok := children[e.Path]; !ok {
				children[e.Path] = []child{}
			}
		}
	}
	// Deepest paths first so every directory is complete before it is hashed.
	order := make([]int, len(entries))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		da, db := strings.Count(entries[a].Path, "/"), strings.Count(entries[b].Path, "/")
		if da != db {
			return db - da
		}
		return strings.Compare(entries[a].Path, entries[b].Path)
	})
	for _, i := range order {
		e := &entries[i]
		if e.Type == TypeDir {
			d, err := dirDigest(children[e.Path])
			if err != nil {
				return "", nil, err
			}
			e.Digest = d
		}
		parent, name := path.Split(e.Path)
		parent = strings.TrimSuffix(parent, "/")
		if _, ok := children[parent]; !ok {
			return "", nil, fmt.Errorf("treehash: root %q: entry %q has no parent directory in the snapshot", rootName, e.Path)
		}
		children[parent] = append(children[parent], child{Name: name, Type: e.Type, Mode: e.Mode, Digest: e.Digest})
	}
	rootDigest, err := dirDigest(children[""])
	if err != nil {
		return "", nil, err
	}
	out := make([]Entry, 0, len(entries)+1)
	out = append(out, Entry{Path: rootName, Type: TypeDir, Digest: rootDigest})
	for _, e := range entries {
		e.Path = rootName + "/" + e.Path
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return rootDigest, out, nil
}

func dirDigest(cs []child) (string, error) {
	slices.SortFunc(cs, func(a, b child) int { return strings.Compare(a.Name, b.Name) })
	return canonicalDigest(cs)
}

// StateDigest is the digest of a state's roots (sorted by name).
func StateDigest(roots []Root) (string, error) {
	rs := slices.Clone(roots)
	slices.SortFunc(rs, func(a, b Root) int { return strings.Compare(a.Name, b.Name) })
	return canonicalDigest(rs)
}

func canonicalDigest(v any) (string, error) {
	raw, err := jsonMarshal(v)
	if err != nil {
		return "", err
	}
	c, err := jcs.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("treehash: canonicalizing: %w", err)
	}
	return digestBytes(c), nil
}

func digestBytes(b []byte) string {
	s := sha256.Sum256(b)
	return fsaccess.DigestPrefix + hex.EncodeToString(s[:])
}

// HashHostRoots computes the state of host directories opened as fsaccess
// roots (name → root).
func HashHostRoots(roots map[string]*fsaccess.Root, lim Limits) (*State, error) {
	snaps := make([]NamedSnapshot, 0, len(roots))
	for name, r := range roots {
		s, err := r.Snapshot("", lim.SnapshotLimits())
		if err != nil {
			return nil, fmt.Errorf("treehash: snapshot of root %q: %w", name, err)
		}
		snaps = append(snaps, NamedSnapshot{Name: name, Snapshot: s})
	}
	return FromSnapshots(snaps, lim)
}

// Diff lists the paths whose entry differs between two states (added, removed
// or changed type, mode or digest), sorted by path. Directories are reported
// only when added or removed or when their mode changed: a directory whose
// digest changed because of a child is implied by the child.
func Diff(before, after []Entry) []Change {
	bm := make(map[string]Entry, len(before))
	for _, e := range before {
		bm[e.Path] = e
	}
	am := make(map[string]Entry, len(after))
	for _, e := range after {
		am[e.Path] = e
	}
	var out []Change
	for _, e := range after {
		b, ok := bm[e.Path]
		switch {
		case !ok:
			a := e
			out = append(out, Change{Path: e.Path, After: &a})
		case b.Type != e.Type || b.Mode != e.Mode || (e.Type != TypeDir && b.Digest != e.Digest):
			bb, a := b, e
			out = append(out, Change{Path: e.Path, Before: &bb, After: &a})
		}
	}
	for _, e := range before {
		if _, ok := am[e.Path]; !ok {
			b := e
			out = append(out, Change{Path: e.Path, Before: &b})
		}
	}
	slices.SortFunc(out, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Change is one path's difference between two states; a nil side is absent.
type Change struct {
	Path   string `json:"path"`
	Before *Entry `json:"before,omitempty"`
	After  *Entry `json:"after,omitempty"`
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

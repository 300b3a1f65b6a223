// Package fixturecopy implements the fixture-copy.v1 EnvironmentBackend
// (resolved decision 38): a bounded, symlink-free managed copy of each root's
// source under the agent's state directory. Writes go only to the copy; the
// source is only read. Teardown deletes only the managed copies. It is a
// managed-copy executor, not a process sandbox, and it is processless: the
// allocation reaches Ready atomically and Start adds nothing.
//
// Layout under <stateDir>/fixtures (every level created 0700):
//
//	<spec.ID>/<root>/            one fixture.Manager directory per root
//	<spec.ID>/<root>/fx-<rand>   the published copy (MountedRoot.Path)
//	<spec.ID>/<root>/copy.json   completion record written after the copy
//	<spec.ID>/<root>/.staging-*  an interrupted copy (removed on sight)
//
// A copy counts as complete only when copy.json names it and records the same
// resolved source; anything else is partial and is removed and redone. No
// Kubernetes imports.
package fixturecopy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/hostlocal"
	"sensorium.dev/workbench/internal/platform/fixture"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// ID is the backend identifier (spec.backend).
const ID = "fixture-copy.v1"

// Bounds.
const (
	MaxRoots = hostlocal.MaxRoots // root-invalid above it
	// MaxIDBytes bounds spec.ID, which becomes a directory name.
	MaxIDBytes = 128
	// MaxRecoverEntries bounds the entries the recovery sweep lists per
	// directory level.
	MaxRecoverEntries = 10_000
	// maxRecordBytes bounds copy.json.
	maxRecordBytes = 64 << 10
)

// Names inside the fixtures tree.
const (
	FixturesDir = "fixtures"
	RecordName  = "copy.json"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// record is copy.json: the completion record of one root's copy.
type record struct {
	Schema   string `json:"schema"`
	ID       string `json:"id"`
	Root     string `json:"root"`
	Source   string `json:"source"`   // the spec's source path (identity of the copy)
	Resolved string `json:"resolved"` // that path, symlinks resolved, when copied
	Copy     string `json:"copy"`     // fx-<rand> name inside the root's directory
	Files    int    `json:"files"`
	Dirs     int    `json:"dirs"`
	Bytes    int64  `json:"bytes"`
}

const recordSchema = "fixture-copy.v1.record"

// Backend is the fixture-copy.v1 backend. It is safe for concurrent use;
// operations on the same environment ID are serialised.
type Backend struct {
	stateDir string
	dir      string // <stateDir>/fixtures
	admitted map[string]string
	limits   fixture.Limits

	locks    backends.IDLocks
	draining backends.DrainMarks

	disks *Disks // nil: copies live on the state filesystem, unbounded (disk.go)
}

var _ backends.Backend = (*Backend)(nil)

// New returns the backend. stateDir is the agent's state directory (copies
// live under <stateDir>/fixtures); admitted is the node's admitted-roots map
// (root name -> absolute directory) that every copy source must lie inside;
// limits bound each root's copy (zero fields: fixture defaults).
func New(stateDir string, admitted map[string]string, limits fixture.Limits) *Backend {
	cp := make(map[string]string, len(admitted))
	for k, v := range admitted {
		cp[k] = v
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = stateDir // Allocate then fails on it with a clear error
	}
	abs = filepath.Clean(abs)
	// The node agent pins mounted roots with no symlink followed: name the agent-owned
	// state directory by its resolved path.
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	return &Backend{
		stateDir: abs,
		dir:      filepath.Join(abs, FixturesDir),
		admitted: cp,
		limits:   limits,
	}
}

// ID returns "fixture-copy.v1".
func (b *Backend) ID() string { return ID }

// Dir is the absolute fixtures directory (<stateDir>/fixtures).
func (b *Backend) Dir() string { return b.dir }

func (b *Backend) lock(id string) func() { return b.locks.Lock(id) }

func validID(id string) error {
	if len(id) == 0 || len(id) > MaxIDBytes || !idPattern.MatchString(id) {
		return actuation.Refusef(actuation.CodeRootInvalid, "environment ID %q must be 1..%d bytes of [A-Za-z0-9._-], not starting with '.', '_' or '-'", id, MaxIDBytes)
	}
	return nil
}

// openFixtures opens (creating 0700) <stateDir>/fixtures as an fsaccess root.
// The state directory itself is operator configuration and is created with
// os.MkdirAll; everything beneath it is created and opened through fsaccess.
func (b *Backend) openFixtures() (*fsaccess.Root, error) {
	if err := os.MkdirAll(b.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("fixture-copy: create state dir %q: %w", b.stateDir, err)
	}
	st, err := fsaccess.OpenRoot(b.stateDir)
	if err != nil {
		return nil, fmt.Errorf("fixture-copy: open state dir %q: %w", b.stateDir, err)
	}
	defer func() { _ = st.Close() }()
	if _, err := st.MkdirAll(FixturesDir, 0o700); err != nil {
		return nil, fmt.Errorf("fixture-copy: create %q: %w", b.dir, err)
	}
	r, err := st.Sub(FixturesDir)
	if err != nil {
		return nil, fmt.Errorf("fixture-copy: open %q: %w", b.dir, err)
	}
	return r, nil
}

type plannedRoot struct {
	name     string
	source   string // the spec's source path
	resolved string // set by admit: the resolved, admitted source directory
	readOnly bool
	admitted []hostlocal.AdmittedRoot
	reuse    string // a complete copy to reuse ("" = copy needed)
	// materialize fills the copy from a workspace source (issue 28) instead of copying
	// a directory; source is then SourcePrefix+SourceID.
	materialize backends.MaterializeFunc
}

// SourcePrefix marks a copy record's source as a workspace source's identity (not a path).
const SourcePrefix = "source:"

// identity is what a root's copy record names: its source directory, or its workspace
// source's identity.
func identity(r backends.Root) string {
	if r.Materialize != nil || r.SourceID != "" {
		return SourcePrefix + r.SourceID
	}
	return r.Source
}

// checkShape validates the spec without touching the sources: ID, root
// count, names, and that every root names a source (not a hostPath).
func (b *Backend) checkShape(spec backends.Spec) ([]plannedRoot, error) {
	if err := validID(spec.ID); err != nil {
		return nil, fmt.Errorf("environment %s: %w", spec.Ref, err)
	}
	if len(spec.Roots) == 0 {
		return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: fixture-copy.v1 needs at least one root", spec.Ref)
	}
	if len(spec.Roots) > MaxRoots {
		return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: %d roots, at most %d", spec.Ref, len(spec.Roots), MaxRoots)
	}
	seen := map[string]bool{}
	out := make([]plannedRoot, 0, len(spec.Roots))
	for i, r := range spec.Roots {
		field := fmt.Sprintf("roots[%d]", i)
		if ref := actuation.ValidateRootName(r.Name); ref != nil {
			return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: %s.name: %s", spec.Ref, field, ref.Message)
		}
		if seen[r.Name] {
			return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: %s.name %q is duplicated", spec.Ref, field, r.Name)
		}
		seen[r.Name] = true
		if r.HostPath != "" {
			return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: %s: fixture-copy.v1 takes a source, not a hostPath", spec.Ref, field)
		}
		if r.Materialize != nil {
			if r.Source != "" || r.SourceID == "" {
				return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: %s: a workspace source needs an identity and no source directory", spec.Ref, field)
			}
			out = append(out, plannedRoot{name: r.Name, source: identity(r), readOnly: r.ReadOnly, materialize: r.Materialize})
			continue
		}
		if r.Source == "" {
			return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: %s.source: a source directory is required", spec.Ref, field)
		}
		out = append(out, plannedRoot{name: r.Name, source: r.Source, readOnly: r.ReadOnly})
	}
	return out, nil
}

// admit checks that p's source is an existing directory inside an admitted
// root (symlinks resolved on both sides) and does not overlap the state
// directory.
func (b *Backend) admit(spec backends.Spec, i int, p *plannedRoot, admitted []hostlocal.AdmittedRoot) error {
	field := fmt.Sprintf("roots[%d].source", i)
	resolved, _, err := hostlocal.CheckDir(admitted, field, p.source)
	if err != nil {
		return fmt.Errorf("environment %s: %w", spec.Ref, err)
	}
	stateDir := b.stateDir
	if r, err := filepath.EvalSymlinks(stateDir); err == nil {
		stateDir = r
	}
	if hostlocal.Within(stateDir, resolved) || hostlocal.Within(resolved, stateDir) {
		return actuation.Refusef(actuation.CodeRootNotAdmitted, "environment %s: %s %q overlaps the agent's state directory %q", spec.Ref, field, p.source, b.stateDir)
	}
	p.resolved, p.admitted = resolved, admitted
	return nil
}

// Allocate makes (or reuses) the managed copy of every root. It is idempotent:
// a complete copy recorded for the same ID, root and source path is reused as
// is (it may hold the environment's writes, and the source need not exist any
// more); a partial one is removed and redone. Every source that has to be
// copied is admitted first, so a refusal copies nothing. Caps refuse with the
// fixture package's codes; copies made by this call are then removed again.
// The result is Ready.
func (b *Backend) Allocate(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("allocate %s: %w", spec.Ref, err)
	}
	failed := func(err error) (backends.Status, error) {
		return backends.Status{Phase: backends.PhaseFailed, Message: err.Error()}, err
	}
	plan, err := b.checkShape(spec)
	if err != nil {
		return failed(err)
	}
	defer b.lock(spec.ID)()
	fx, err := b.openFixtures()
	if err != nil {
		return failed(err)
	}
	defer func() { _ = fx.Close() }()
	diskCreated, err := b.ensureDisk(ctx, fx, spec)
	if err != nil {
		// The refusal's code leads the message (storage-exhausted: ..., as a condition shows it).
		return failed(fmt.Errorf("%w (allocating environment %s)", err, spec.Ref))
	}
	releaseDisk := func(err error) error {
		if diskCreated {
			err = errors.Join(err, b.releaseDisk(spec.ID))
		}
		return err
	}

	// Pass 1: find reusable copies; admit every source that must be copied.
	admitted := hostlocal.Admitted(b.admitted)
	for i := range plan {
		p := &plan[i]
		if p.reuse, err = b.findComplete(fx, spec.ID, p.name, p.source); err != nil {
			return failed(releaseDisk(fmt.Errorf("allocate %s root %q: %w", spec.Ref, p.name, err)))
		}
		if p.reuse == "" && p.materialize == nil {
			if err := b.admit(spec, i, p, admitted); err != nil {
				return failed(releaseDisk(err))
			}
		}
	}
	// Pass 2: copy.
	var (
		roots   []backends.MountedRoot
		created []string // root dirs (rel to fixtures) whose copy this call made
	)
	rollback := func(err error) (backends.Status, error) {
		for _, rel := range created {
			if rerr := b.removeRootCopies(fx, rel); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		return failed(releaseDisk(err))
	}
	for _, p := range plan {
		if err := ctx.Err(); err != nil {
			return rollback(fmt.Errorf("allocate %s: %w", spec.Ref, err))
		}
		path := p.reuse
		if path == "" {
			rel := spec.ID + "/" + p.name
			created = append(created, rel)
			if path, err = b.makeCopy(ctx, fx, spec.ID, rel, p); err != nil {
				return rollback(fmt.Errorf("allocate %s root %q: %w", spec.Ref, p.name, err))
			}
		}
		roots = append(roots, backends.MountedRoot{Name: p.name, Path: path, ReadOnly: p.readOnly})
	}
	b.draining.Forget(spec.ID)
	return backends.Status{Phase: backends.PhaseReady, Roots: roots}, nil
}

// readRecord reads <rel>/copy.json; a missing or malformed record is nil.
func readRecord(fx *fsaccess.Root, rel string) *record {
	data, _, err := fx.ReadFile(rel+"/"+RecordName, maxRecordBytes)
	if err != nil {
		return nil
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil || rec.Schema != recordSchema {
		return nil
	}
	return &rec
}

// findComplete returns the absolute path of the complete copy of root name
// of environment id recorded for source, or "" when there is none (no
// directory, no or another record, a missing copy, extra copies or staging).
func (b *Backend) findComplete(fx *fsaccess.Root, id, name, source string) (string, error) {
	rel := id + "/" + name
	if e, err := fx.Lstat(rel); err != nil || e.Type != fsaccess.TypeDir {
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	rec := readRecord(fx, rel)
	if rec == nil || rec.ID != id || rec.Root != name || rec.Source != source {
		return "", nil
	}
	m, err := fixture.NewManager(filepath.Join(b.dir, rel))
	if err != nil {
		return "", err
	}
	defer func() { _ = m.Close() }()
	l, err := m.List()
	if err != nil {
		return "", err
	}
	want := filepath.Join(m.Dir(), rec.Copy)
	if len(l.Staging) == 0 && len(l.Copies) == 1 && l.Copies[0] == want {
		return want, nil
	}
	return "", nil
}

// makeCopy clears the root directory rel of any partial or stale copy, then
// copies the admitted source and records the copy as complete.
func (b *Backend) makeCopy(ctx context.Context, fx *fsaccess.Root, id, rel string, p plannedRoot) (string, error) {
	if _, err := fx.MkdirAll(rel, 0o700); err != nil {
		return "", fmt.Errorf("create %q: %w", filepath.Join(b.dir, rel), err)
	}
	if err := b.removeRootCopies(fx, rel); err != nil {
		return "", err
	}
	m, err := fixture.NewManager(filepath.Join(b.dir, rel))
	if err != nil {
		return "", err
	}
	defer func() { _ = m.Close() }()
	var res *fixture.CopyResult
	if p.materialize != nil {
		res, err = m.Fill(func(st *fsaccess.Root, dir string) (int, int, int64, error) { return p.materialize(ctx, st, dir) })
		if err != nil {
			return "", err
		}
	} else {
		pinned, unpin, err := pinSource(p)
		if err != nil {
			return "", err
		}
		res, err = m.Copy(pinned, b.limits)
		unpin()
		if err != nil {
			return "", b.copyError(p.source, err)
		}
	}
	rec := record{Schema: recordSchema, ID: id, Root: p.name, Source: p.source, Resolved: p.resolved,
		Copy: res.Name, Files: res.Files, Dirs: res.Dirs, Bytes: res.Bytes}
	data, err := json.Marshal(rec)
	if err == nil {
		err = fx.WriteFileAtomic(rel+"/"+RecordName, data, 0o600)
	}
	if err != nil {
		return "", fmt.Errorf("record copy %q: %w", res.Dir, err)
	}
	return res.Dir, nil
}

// removeRootCopies deletes, inside the root directory rel, the managed copies
// (through fixture.Manager.Teardown), staging dirs, the record and leftover
// temp files of an atomic record write. Nothing else is touched.
func (b *Backend) removeRootCopies(fx *fsaccess.Root, rel string) error {
	if _, err := fx.Lstat(rel); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	m, err := fixture.NewManager(filepath.Join(b.dir, rel))
	if err != nil {
		return err
	}
	defer func() { _ = m.Close() }()
	l, err := m.List()
	if err != nil {
		return err
	}
	for _, c := range l.Copies {
		if err := m.Teardown(c); err != nil {
			return err
		}
	}
	if _, err := m.RemoveStaging(); err != nil {
		return err
	}
	names, err := listNames(fx, rel)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n.name == RecordName || strings.HasPrefix(n.name, fsaccess.TempPrefix) {
			if err := fx.Remove(rel + "/" + n.name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

type dirEntry struct {
	name string
	typ  fsaccess.EntryType
}

// listNames lists the direct entries of rel ("" = fixtures dir), bounded.
func listNames(fx *fsaccess.Root, rel string) ([]dirEntry, error) {
	var out []dirEntry
	wr, err := fx.Walk(rel, fsaccess.WalkLimits{MaxEntries: MaxRecoverEntries, MaxDepth: 1}, func(w *fsaccess.WalkEntry) error {
		name := w.Path
		if rel != "" {
			name = strings.TrimPrefix(w.Path, rel+"/")
		}
		out = append(out, dirEntry{name: name, typ: w.Type})
		if w.Type == fsaccess.TypeDir {
			return fs.SkipDir // direct entries only
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	if wr.Truncated {
		return out, actuation.Refusef(actuation.CodeTooManyEntries, "%q holds more than %d entries", filepath.Join(fx.Dir(), rel), MaxRecoverEntries)
	}
	return out, nil
}

// Start returns what Allocate returns: fixture-copy.v1 has no separate start.
func (b *Backend) Start(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	return b.Allocate(ctx, spec)
}

// Inspect verifies, now, that every root's complete copy exists (the source
// is not consulted: it may be gone). A missing or partial copy yields Failed
// with a message.
func (b *Backend) Inspect(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("inspect %s: %w", spec.Ref, err)
	}
	plan, err := b.checkShape(spec)
	if err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Message: err.Error()}, nil
	}
	defer b.lock(spec.ID)()
	fx, err := b.openFixtures()
	if err != nil {
		return backends.Status{}, err
	}
	defer func() { _ = fx.Close() }()
	var roots []backends.MountedRoot
	for _, p := range plan {
		path, err := b.findComplete(fx, spec.ID, p.name, p.source)
		if err != nil {
			return backends.Status{}, fmt.Errorf("inspect %s root %q: %w", spec.Ref, p.name, err)
		}
		if path == "" {
			return backends.Status{Phase: backends.PhaseFailed, Message: fmt.Sprintf("copy of root %q is missing or incomplete in %s", p.name, filepath.Join(b.dir, spec.ID, p.name))}, nil
		}
		roots = append(roots, backends.MountedRoot{Name: p.name, Path: path, ReadOnly: p.readOnly})
	}
	if b.draining.Draining(spec.ID) {
		return backends.Status{Phase: backends.PhaseDraining, Roots: roots}, nil
	}
	return backends.Status{Phase: backends.PhaseReady, Roots: roots}, nil
}

// Drain marks the environment Draining; the copies stay until Teardown.
func (b *Backend) Drain(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("drain %s: %w", spec.Ref, err)
	}
	if err := validID(spec.ID); err != nil {
		return backends.Status{}, err
	}
	b.draining.Mark(spec.ID)
	return backends.Status{Phase: backends.PhaseDraining}, nil
}

// Teardown deletes the environment's managed copies and nothing else: inside
// <fixtures>/<ID> it removes, per root directory, the fx-* copies (through
// fixture.Manager), staging dirs, copy.json and record temp files, then the
// emptied directories. Anything it does not recognise stays and is reported as
// Residue. The source directories are never touched. Idempotent: a missing
// environment directory is Closed with no residue.
func (b *Backend) Teardown(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("teardown %s: %w", spec.Ref, err)
	}
	if err := validID(spec.ID); err != nil {
		return backends.Status{}, err
	}
	defer b.lock(spec.ID)()
	fx, err := b.openFixtures()
	if err != nil {
		return backends.Status{}, err
	}
	defer func() { _ = fx.Close() }()
	// The disk goes whole first (unmounted, lazily when a sandbox or a pin still holds
	// it; its loop device detaches with its last user); the emptied mount point is then
	// removed like any environment directory.
	if err := b.releaseDisk(spec.ID); err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Message: err.Error()}, fmt.Errorf("teardown %s: %w", spec.Ref, err)
	}
	residue, err := b.teardownID(fx, spec.ID)
	b.draining.Forget(spec.ID)
	if err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Message: err.Error(), Residue: residue}, fmt.Errorf("teardown %s: %w", spec.Ref, err)
	}
	st := backends.Status{Phase: backends.PhaseClosed, Residue: residue}
	if len(residue) > 0 {
		st.Message = fmt.Sprintf("%d unrecognised entries left in place", len(residue))
	}
	return st, nil
}

// teardownID removes the managed copies of one environment and returns what
// was left.
func (b *Backend) teardownID(fx *fsaccess.Root, id string) ([]string, error) {
	e, err := fx.Lstat(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if e.Type != fsaccess.TypeDir {
		return []string{filepath.Join(b.dir, id)}, nil
	}
	entries, err := listNames(fx, id)
	if err != nil {
		return nil, err
	}
	var residue []string
	for _, de := range entries {
		rel := id + "/" + de.name
		if de.typ != fsaccess.TypeDir || actuation.ValidateRootName(de.name) != nil {
			residue = append(residue, filepath.Join(b.dir, rel))
			continue
		}
		if err := b.removeRootCopies(fx, rel); err != nil {
			return residue, err
		}
		left, err := listNames(fx, rel)
		if err != nil {
			return residue, err
		}
		if len(left) > 0 {
			for _, l := range left {
				residue = append(residue, filepath.Join(b.dir, rel, l.name))
			}
			continue
		}
		if err := fx.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return residue, err
		}
	}
	if len(residue) == 0 {
		if err := fx.Remove(id); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return residue, err
		}
		if err := fx.SyncDir(""); err != nil {
			return residue, err
		}
	}
	sort.Strings(residue)
	return residue, nil
}

// Recover is the host-owned reconciliation sweep over <stateDir>/fixtures:
// every environment directory whose ID is not in known is removed whole
// (outcome "terminated", fd-based, never following symlinks), as is any
// non-directory entry; for a known ID, staging leftovers, partial copies and
// directories of roots the spec no longer names are removed ("terminated")
// and each complete copy is kept ("recovered"). Failures to remove are
// reported per resource as "failed-retryable"; the error is non-nil only when
// the sweep could not run at all.
func (b *Backend) Recover(ctx context.Context, known map[string]backends.Spec) ([]backends.RecoveryAction, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("recover fixture-copy.v1: %w", err)
	}
	fx, err := b.openFixtures()
	if err != nil {
		return nil, err
	}
	defer func() { _ = fx.Close() }()
	// Disks first: an unknown environment's disk is unmounted and deleted before its
	// directory is removed; a known one is mounted again (after a reboot) so its copy is
	// found below.
	actions := b.recoverDisks(known)
	entries, err := listNames(fx, "")
	if err != nil {
		return actions, fmt.Errorf("recover fixture-copy.v1: list %q: %w", b.dir, err)
	}
	b.draining.Retain(known)
	remove := func(rel, why string) {
		path := filepath.Join(b.dir, rel)
		if err := fx.RemoveAll(rel); err != nil {
			actions = append(actions, backends.RecoveryAction{Resource: path, Outcome: "failed-retryable", Message: fmt.Sprintf("%s; remove: %v", why, err)})
			return
		}
		actions = append(actions, backends.RecoveryAction{Resource: path, Outcome: "terminated", Message: why})
	}
	for _, de := range entries {
		if err := ctx.Err(); err != nil {
			return actions, fmt.Errorf("recover fixture-copy.v1: %w", err)
		}
		spec, ok := known[de.name]
		switch {
		case de.typ != fsaccess.TypeDir:
			remove(de.name, "not an environment directory")
		case !ok:
			unlock := b.lock(de.name)
			remove(de.name, "environment not known to the store")
			unlock()
		default:
			actions = append(actions, b.recoverKnown(ctx, fx, spec)...)
		}
	}
	if err := fx.SyncDir(""); err != nil {
		return actions, fmt.Errorf("recover fixture-copy.v1: %w", err)
	}
	return actions, nil
}

// recoverKnown sweeps one known environment's directory.
func (b *Backend) recoverKnown(ctx context.Context, fx *fsaccess.Root, spec backends.Spec) []backends.RecoveryAction {
	defer b.lock(spec.ID)()
	var actions []backends.RecoveryAction
	act := func(rel, outcome, msg string) {
		actions = append(actions, backends.RecoveryAction{Resource: filepath.Join(b.dir, rel), Outcome: outcome, Message: msg})
	}
	sources := map[string]string{} // root name -> source path of the spec
	for _, r := range spec.Roots {
		sources[r.Name] = identity(r)
	}
	entries, err := listNames(fx, spec.ID)
	if err != nil {
		act(spec.ID, "failed-retryable", fmt.Sprintf("list: %v", err))
		return actions
	}
	for _, de := range entries {
		if ctx.Err() != nil {
			return actions
		}
		rel := spec.ID + "/" + de.name
		source, named := sources[de.name]
		if de.typ != fsaccess.TypeDir || !named {
			if err := fx.RemoveAll(rel); err != nil {
				act(rel, "failed-retryable", fmt.Sprintf("root not in the environment's spec; remove: %v", err))
			} else {
				act(rel, "terminated", "root not in the environment's spec")
			}
			continue
		}
		m, err := fixture.NewManager(filepath.Join(b.dir, rel))
		if err != nil {
			act(rel, "failed-retryable", err.Error())
			continue
		}
		staged, err := m.RemoveStaging()
		for _, s := range staged {
			actions = append(actions, backends.RecoveryAction{Resource: s, Outcome: "terminated", Message: "staging left by an interrupted copy"})
		}
		if err != nil {
			act(rel, "failed-retryable", fmt.Sprintf("remove staging: %v", err))
			_ = m.Close()
			continue
		}
		keep := ""
		if rec := readRecord(fx, rel); rec != nil && rec.ID == spec.ID && rec.Root == de.name && rec.Source == source {
			keep = filepath.Join(m.Dir(), rec.Copy)
		}
		l, err := m.List()
		if err != nil {
			act(rel, "failed-retryable", fmt.Sprintf("list: %v", err))
			_ = m.Close()
			continue
		}
		kept := false
		for _, c := range l.Copies {
			if c == keep {
				kept = true
				actions = append(actions, backends.RecoveryAction{Resource: c, Outcome: "recovered", Message: "complete managed copy kept"})
				continue
			}
			if err := m.Teardown(c); err != nil {
				actions = append(actions, backends.RecoveryAction{Resource: c, Outcome: "failed-retryable", Message: fmt.Sprintf("partial copy; remove: %v", err)})
			} else {
				actions = append(actions, backends.RecoveryAction{Resource: c, Outcome: "terminated", Message: "partial or unrecorded copy"})
			}
		}
		_ = m.Close()
		if names, err := listNames(fx, rel); err == nil {
			for _, n := range names {
				if strings.HasPrefix(n.name, fsaccess.TempPrefix) && fx.Remove(rel+"/"+n.name) == nil {
					act(rel+"/"+n.name, "terminated", "temp file of an interrupted record write")
				}
			}
		}
		if !kept {
			if err := fx.Remove(rel + "/" + RecordName); err != nil && !errors.Is(err, fs.ErrNotExist) {
				act(rel+"/"+RecordName, "failed-retryable", err.Error())
			}
		}
	}
	return actions
}

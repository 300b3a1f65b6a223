package fixturecopy

import (
	"context"
	"io"
	"path/filepath"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/hostexec"
	"sensorium.dev/workbench/internal/platform/fixture"
)

// Open returns the Env of environment id: the node's sandbox runs its commands (hostexec)
// and its roots are the managed copies on the host (MountedRoot.Path), with two rules of
// its own — no PTY program (Terminal refuses) and exports through the managed directory
// (fixture.Manager.Export) rather than the pinned root.
func (b *Backend) Open(id string) (backends.Env, error) {
	e := hostexec.Open(id)
	e.Exec, e.Roots = executor{e.Exec}, roots{e.Roots}
	return e, nil
}

// MaterializesSources: a sourced root (git, archive, oci) is filled into the managed copy
// by Allocate (Root.Materialize).
func (b *Backend) MaterializesSources() bool { return true }

// errNoPTY is fixture-copy.v1's refusal of every PTY program.
var errNoPTY = &actuation.Refusal{Code: actuation.CodeCapabilityMismatch,
	Message: "fixture-copy.v1 is a managed copy, not a process sandbox: no PTY"}

// executor is the host executor with no PTY programs: commands and action classes run in
// the node's sandbox as on host-local.
type executor struct{ backends.Executor }

// Terminal refuses (capability-mismatch) before anything else is checked.
func (executor) Terminal(backends.TerminalRequest) (backends.Terminal, *actuation.Refusal) {
	return backends.Terminal{}, errNoPTY
}

// roots opens a managed copy as the host does (its pinned directory); only its export
// differs.
type roots struct{ backends.RootOpener }

func (r roots) OpenRoot(mr backends.MountedRoot, pinned backends.PinnedRoot) (backends.RootFiles, error) {
	f, err := r.RootOpener.OpenRoot(mr, pinned)
	if err != nil {
		return nil, err
	}
	return files{RootFiles: f, copyDir: mr.Path}, nil
}

// files is a managed copy's file access: the host's, except Export.
type files struct {
	backends.RootFiles
	copyDir string
}

// Export writes the copy's subtree rel through its fixture.Manager: the copy must be a
// managed copy directly inside its root's managed directory (fixture-outside-managed-dir
// otherwise), opened again by name beneath it; the tar is fixture.ExportRoot's.
func (f files) Export(_ context.Context, rel string, w io.Writer, lim fixture.Limits) (*fixture.ExportResult, error) {
	m, err := fixture.NewManager(filepath.Dir(f.copyDir))
	if err != nil {
		return nil, err
	}
	defer func() { _ = m.Close() }()
	return m.Export(f.copyDir, rel, w, lim)
}

// BoundsPIDs: every command runs in a cgroup of its own with the environment's pids limit
// (as on host-local).
func (b *Backend) BoundsPIDs(backends.Spec) bool { return true }

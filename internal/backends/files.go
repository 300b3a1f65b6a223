package backends

import (
	"context"
	"errors"
	"io"

	"sensorium.dev/workbench/internal/platform/fixture"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/patch"
)

// RootOpener opens an environment's mounted roots for file access (Env.Roots): one
// implementation over the node's pinned host directories (internal/backends/hostexec),
// one over the guest protocol (internal/backends/guestenv, through
// internal/backends/guestfs). The rooms of the node agent use the RootFiles it returns
// without asking which one they hold.
type RootOpener interface {
	// OpenRoot opens mr. pinned returns the node's pinned directory of a host root (the
	// node's environments registry holds it open; never close it): the host
	// implementation calls it, an implementation whose roots live elsewhere never does.
	// A root this placement cannot reach is refused with its code.
	OpenRoot(mr MountedRoot, pinned PinnedRoot) (RootFiles, error)
}

// PinnedRoot returns the node's pinned host directory of one root.
type PinnedRoot func() (*fsaccess.Root, error)

// RootFiles is one root's file access: reads (fsaccess.Files), patches and exports, on the
// host or in a guest alike. What a placement cannot do is a refusal with its code, or a
// capability it does not offer (Watch).
type RootFiles interface {
	fsaccess.Files
	// ApplyPatch applies a planned patch (patch.Apply's rules); an error wrapping
	// ErrPatchOutcomeUnknown says which files changed cannot be proved (the host's apply
	// never returns it: it rolls back or reports).
	ApplyPatch(ctx context.Context, req patch.Request) (*patch.Result, error)
	// Export writes rel as a tar stream to w within lim.
	Export(ctx context.Context, rel string, w io.Writer, lim fixture.Limits) (*fixture.ExportResult, error)
	// GitPatchRoot is the host directory a git-patch export reads; a root with none
	// refuses (export-invalid).
	GitPatchRoot() (*fsaccess.Root, error)
	// Watch is the pinned host directory whose changes the node's file watcher
	// (inotify) observes, and which probes and recordings read directly; a root with no
	// change notifications refuses (capability-mismatch): file waits on it are refused,
	// and its probes and recordings read through fsaccess.Files.
	Watch() (*fsaccess.Root, error)
	// Origin names where the root's files come from in messages ("" on the host).
	Origin() string
}

// ErrPatchOutcomeUnknown: a patch's effect on a root's files cannot be proved (an apply or
// a rollback was admitted but its answer was lost, and re-reading the file did not settle
// it). RootFiles.ApplyPatch returns it wrapped; never for a refusal.
var ErrPatchOutcomeUnknown = errors.New("guestfs: patch outcome unknown")

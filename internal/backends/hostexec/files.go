package hostexec

import (
	"context"
	"io"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fixture"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/patch"
)

// Roots opens a host environment's roots: each is the node's pinned directory of the root
// (MountedRoot.Path), read and written through internal/platform/fsaccess.
type Roots struct{}

var _ backends.RootOpener = Roots{}

// OpenRoot returns mr's pinned host directory; a root without one is refused.
func (Roots) OpenRoot(mr backends.MountedRoot, pinned backends.PinnedRoot) (backends.RootFiles, error) {
	if mr.Path == "" || pinned == nil {
		return nil, actuation.Refusef(actuation.CodeCapabilityMismatch, "root %s has no host directory", mr.Name)
	}
	r, err := pinned()
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, actuation.Refusef(actuation.CodeRootInvalid, "root %s is not pinned on this node", mr.Name)
	}
	return files{Files: fsaccess.Host(r), r: r}, nil
}

// files is a host root's backends.RootFiles: the pinned directory.
type files struct {
	fsaccess.Files
	r *fsaccess.Root
}

func (h files) ApplyPatch(_ context.Context, req patch.Request) (*patch.Result, error) {
	return patch.Apply(h.r, req)
}

func (h files) Export(_ context.Context, rel string, w io.Writer, lim fixture.Limits) (*fixture.ExportResult, error) {
	return fixture.ExportRoot(h.r, rel, w, lim)
}

func (h files) GitPatchRoot() (*fsaccess.Root, error) { return h.r, nil }

func (h files) Watch() (*fsaccess.Root, error) { return h.r, nil }

func (files) Origin() string { return "" }

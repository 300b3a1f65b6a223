package guestenv

import (
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/guestfs"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

var _ backends.RootOpener = (*env)(nil)

// OpenRoot opens mr's directory inside the guest (MountedRoot.GuestDir): every operation
// opens its own channel through the backend's broker (guestfs). The node's pinned host
// directories are never consulted: a guest root has none.
func (e *env) OpenRoot(mr backends.MountedRoot, _ backends.PinnedRoot) (backends.RootFiles, error) {
	if mr.GuestDir == "" {
		return nil, actuation.Refusef(actuation.CodeCapabilityMismatch, "root %s has no directory in the guest", mr.Name)
	}
	gr, err := guestfs.New(e.Dial, mr.GuestDir)
	if err != nil {
		return nil, actuation.Refusef(actuation.CodeRootInvalid, "root %s: %v", mr.Name, err)
	}
	return guestFiles{Root: gr, name: mr.Name}, nil
}

// guestFiles is a guest root's backends.RootFiles: every operation over the guest
// protocol (guestfs).
type guestFiles struct {
	*guestfs.Root
	name string
}

// GitPatchRoot refuses: a git-patch export reads a host directory.
func (g guestFiles) GitPatchRoot() (*fsaccess.Root, error) {
	return nil, actuation.Refusef(actuation.CodeExportInvalid, "root %s lives in a VM guest; git-patch exports read host roots only (export it as tar)", g.name)
}

// Watch refuses: the guest protocol has no change notifications, and a wait never polls.
func (guestFiles) Watch() (*fsaccess.Root, error) {
	return nil, actuation.Refusef(actuation.CodeCapabilityMismatch,
		"file waits on VM environments are not available: the guest protocol has no change notifications")
}

func (guestFiles) Origin() string { return "the guest" }

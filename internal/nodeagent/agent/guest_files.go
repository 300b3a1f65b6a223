package agent

import (
	"time"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// openRoot opens a mounted root of env through its backend's port (backends.Env.Roots):
// the backend's file-access implementation says where the root lives (the node's pinned
// host directory, or a directory inside the environment's VM guest, each guest operation
// opening its own channel through the backend's host broker). The agent only hands it
// the node's pinned root, which the host implementation reads.
func (a *Agent) openRoot(env *wbv1.Environment, mr backends.MountedRoot) (backends.RootFiles, error) {
	e, err := a.openEnv(env)
	if err != nil {
		return nil, err
	}
	if e.Roots == nil {
		return nil, actuation.Refusef(actuation.CodeCapabilityMismatch, "backend %s offers no file access to root %s", env.Spec.Backend, mr.Name)
	}
	uid := string(env.UID)
	return e.Roots.OpenRoot(mr, func() (*fsaccess.Root, error) { return a.pinnedRootOf(uid, mr.Name) })
}

// patchTimeout bounds a FilePatch's apply (planning reads, stages, applies and a rollback
// inside a guest, each operation also bounded by guestfs.OpTimeout; a host apply is local).
const patchTimeout = 5 * time.Minute

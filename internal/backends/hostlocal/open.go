package hostlocal

import (
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/hostexec"
)

// Open returns the host Env of environment id: the node's sandbox runs its processes
// (hostexec) and its roots are host directories (MountedRoot.Path).
func (b *Backend) Open(id string) (backends.Env, error) { return hostexec.Open(id), nil }

// BoundsPIDs: every command and session runs in a cgroup of its own with the
// environment's pids limit.
func (b *Backend) BoundsPIDs(backends.Spec) bool { return true }

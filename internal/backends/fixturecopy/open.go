package fixturecopy

import "sensorium.dev/workbench/internal/backends"

// Open returns the host Env of environment id: the node's sandbox runs its processes and
// its roots are host directories (MountedRoot.Path).
func (b *Backend) Open(id string) (backends.Env, error) { return backends.HostEnv(id), nil }

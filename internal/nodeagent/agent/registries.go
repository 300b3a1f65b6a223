package agent

import (
	"sync"

	"sensorium.dev/workbench/internal/backends"
)

// The agent's in-process state is split by responsibility, each part behind its own lock
// and a narrow set of methods (issue 16 item 10):
//
//   - envRegistry: the environments allocated in this process and their pinned host roots
//     (environment/backend lifecycle; roots.go);
//   - sessions.Registry: the sessions this process serves (their rings and PTY programs;
//     the sessions room);
//   - Agent.mu: the command table and what hangs off it (running handles and finished
//     results, the data plane's change signal and uploads, the recovery report, the
//     pending-wait count).
//
// No method of one registry calls into another while holding its lock, so the locks are
// never nested and need no order.

// envRegistry holds the environments allocated in this process and their pinned roots.
type envRegistry struct {
	mu   sync.Mutex
	envs map[string]*liveEnv               // environment UID → spec and backend status
	pins map[string]map[string]*pinnedRoot // environment UID → root name → pinned directory
}

func newEnvRegistry() *envRegistry {
	return &envRegistry{envs: map[string]*liveEnv{}, pins: map[string]map[string]*pinnedRoot{}}
}

// remember records an environment's latest backend status.
func (r *envRegistry) remember(spec backends.Spec, st backends.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.envs[spec.ID] = &liveEnv{spec: spec, status: st}
}

// forget drops an environment and closes its pinned roots.
func (r *envRegistry) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pins[id] {
		_ = p.root.Close()
	}
	delete(r.pins, id)
	delete(r.envs, id)
}

// mounted returns the environment's roots if it is ready in this process.
func (r *envRegistry) mounted(envUID string) ([]backends.MountedRoot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.envs[envUID]
	if !ok || e.status.Phase != backends.PhaseReady {
		return nil, false
	}
	return e.status.Roots, true
}

// ref returns "namespace/name" of an environment of this process, or "".
func (r *envRegistry) ref(envUID string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return refOf(r.envs[envUID])
}

// pinsOf returns the pinned roots of an environment (the map is never mutated after it is
// stored: pin replaces it).
func (r *envRegistry) pinsOf(envUID string) map[string]*pinnedRoot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pins[envUID]
}

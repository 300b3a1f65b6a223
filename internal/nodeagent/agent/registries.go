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
//   - sessionRegistry: the sessions this process serves (their rings and PTY programs);
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

// sessionRegistry holds the sessions this process serves.
type sessionRegistry struct {
	mu sync.Mutex
	m  map[string]*liveSession // session UID → ring (+ PTY)
}

func newSessionRegistry() *sessionRegistry {
	return &sessionRegistry{m: map[string]*liveSession{}}
}

// get returns the session (nil when this process does not hold it) and whether it is closed.
func (r *sessionRegistry) get(uid string) (*liveSession, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.m[uid]
	return s, s != nil && s.closed
}

// open returns the session when it is held and not closed, else nil.
func (r *sessionRegistry) open(uid string) *liveSession {
	if s, closed := r.get(uid); s != nil && !closed {
		return s
	}
	return nil
}

func (r *sessionRegistry) put(uid string, s *liveSession) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[uid] = s
}

// markClosed marks a held session closed and returns it (nil when not held).
func (r *sessionRegistry) markClosed(uid string) *liveSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.m[uid]
	if s != nil {
		s.closed = true
		s.releaseShare()
	}
	return s
}

func (r *sessionRegistry) remove(uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.m[uid]; s != nil {
		s.releaseShare()
	}
	delete(r.m, uid)
}

// openIn returns the UIDs of the open sessions of an environment.
func (r *sessionRegistry) openIn(envUID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for uid, s := range r.m {
		if s.envUID == envUID && !s.closed {
			out = append(out, uid)
		}
	}
	return out
}

// openCounts counts the open sessions, in all and per environment UID.
func (r *sessionRegistry) openCounts() (int, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	open, perEnv := 0, map[string]int{}
	for _, s := range r.m {
		if !s.closed {
			open++
			perEnv[s.envUID]++
		}
	}
	return open, perEnv
}

// dropClosed forgets the closed sessions live does not name (their objects are gone).
func (r *sessionRegistry) dropClosed(live map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, s := range r.m {
		if s.closed && !live[uid] {
			delete(r.m, uid)
		}
	}
}

// uids returns the UIDs of every held session.
func (r *sessionRegistry) uids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.m))
	for uid := range r.m {
		out = append(out, uid)
	}
	return out
}

// len is the number of held sessions.
func (r *sessionRegistry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

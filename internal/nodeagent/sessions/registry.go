package sessions

import (
	"sync"
	"time"

	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/session"
)

// Live is a session this process serves: always an event ring; a PTY program too
// when the session names a shell profile.
type Live struct {
	EnvUID  string
	Ring    *ring.Ring
	PTY     *session.Session
	Started time.Time
	closed  bool // guarded by the registry's lock
	// release gives the session's slot of the session shares back (once).
	release func()
}

// releaseShare gives a session's share slot back (idempotent: fairshare releases once).
func (s *Live) releaseShare() {
	if s.release != nil {
		s.release()
	}
}

// Registry holds the sessions this process serves.
type Registry struct {
	mu sync.Mutex
	m  map[string]*Live // session UID → ring (+ PTY)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{m: map[string]*Live{}}
}

// Get returns the session (nil when this process does not hold it) and whether it is closed.
func (r *Registry) Get(uid string) (*Live, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.m[uid]
	return s, s != nil && s.closed
}

// Open returns the session when it is held and not closed, else nil.
func (r *Registry) Open(uid string) *Live {
	if s, closed := r.Get(uid); s != nil && !closed {
		return s
	}
	return nil
}

// Put holds s as the session uid.
func (r *Registry) Put(uid string, s *Live) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[uid] = s
}

// MarkClosed marks a held session closed and returns it (nil when not held).
func (r *Registry) MarkClosed(uid string) *Live {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.m[uid]
	if s != nil {
		s.closed = true
		s.releaseShare()
	}
	return s
}

// Remove forgets the session uid and gives its share slot back.
func (r *Registry) Remove(uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.m[uid]; s != nil {
		s.releaseShare()
	}
	delete(r.m, uid)
}

// OpenIn returns the UIDs of the open sessions of an environment.
func (r *Registry) OpenIn(envUID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for uid, s := range r.m {
		if s.EnvUID == envUID && !s.closed {
			out = append(out, uid)
		}
	}
	return out
}

// OpenCounts counts the open sessions, in all and per environment UID.
func (r *Registry) OpenCounts() (int, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	open, perEnv := 0, map[string]int{}
	for _, s := range r.m {
		if !s.closed {
			open++
			perEnv[s.EnvUID]++
		}
	}
	return open, perEnv
}

// DropClosed forgets the closed sessions live does not name (their objects are gone).
func (r *Registry) DropClosed(live map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, s := range r.m {
		if s.closed && !live[uid] {
			delete(r.m, uid)
		}
	}
}

// UIDs returns the UIDs of every held session.
func (r *Registry) UIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.m))
	for uid := range r.m {
		out = append(out, uid)
	}
	return out
}

// Len is the number of held sessions.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

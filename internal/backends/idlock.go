package backends

import "sync"

// IDLocks serialises lifecycle calls per environment ID (Allocate, Teardown and Recover of
// the same ID never interleave) while calls for different IDs run concurrently. Entries are
// dropped when their last holder unlocks, so the map stays bounded by the calls in flight.
// The zero value is ready to use.
type IDLocks struct {
	mu    sync.Mutex
	locks map[string]*idLock
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

// Lock locks id and returns its unlock function.
func (k *IDLocks) Lock(id string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*idLock{}
	}
	l := k.locks[id]
	if l == nil {
		l = &idLock{}
		k.locks[id] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, id)
		}
		k.mu.Unlock()
	}
}

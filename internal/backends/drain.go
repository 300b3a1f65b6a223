package backends

import "sync"

// DrainMarks is the set of environment IDs a backend has been asked to drain, for backends
// that keep the mark in process memory only (the node agent's store holds the durable
// phase). The zero value is empty and ready; it is safe for concurrent use.
type DrainMarks struct {
	mu  sync.Mutex
	ids map[string]bool
}

// Mark records id as draining.
func (d *DrainMarks) Mark(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ids == nil {
		d.ids = map[string]bool{}
	}
	d.ids[id] = true
}

// Forget drops the mark of id.
func (d *DrainMarks) Forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.ids, id)
}

// Draining reports whether id is marked.
func (d *DrainMarks) Draining(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ids[id]
}

// Retain drops the marks of every environment not in known (after a restart, the marks of
// environments the store no longer knows).
func (d *DrainMarks) Retain(known map[string]Spec) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.ids {
		if _, ok := known[id]; !ok {
			delete(d.ids, id)
		}
	}
}

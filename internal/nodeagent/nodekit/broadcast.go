package nodekit

import "sync"

// Broadcaster is a change signal a reconciler fires when its resource moves:
// Changed returns a channel closed at the next Broadcast. The zero value is
// ready to use; it is safe for concurrent use and allocates a channel only
// when somebody is listening.
type Broadcaster struct {
	mu sync.Mutex
	ch chan struct{}
}

// Changed returns a channel closed at the next Broadcast.
func (b *Broadcaster) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Broadcast wakes every current listener.
func (b *Broadcaster) Broadcast() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

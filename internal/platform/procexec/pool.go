package procexec

import (
	"fmt"
	"sync"
	"time"
)

// Pool is the one pre-started sandbox pool (issue 13): it keeps up to Size things started
// ahead — a sandbox helper with its output pipe and cgroup for commands (prestart.go), a
// helper on a PTY of its own for sessions (PrestartedTerminal) — and hands each out once.
//
//   - Take pops the oldest idle one that is still alive (a dead one is discarded and the
//     next tried); what was taken is never handed out again: the pool has no way back in.
//   - Refill starts what is missing in the background, one at a time, and only while
//     Busy reports false: a refill never competes with a start (the caller refills again
//     when it is idle). A failed start is retried no sooner than RetryAfter.
//   - Size is bounded by MaxPoolSize; Close discards what waits, stops refilling and
//     waits for an in-flight refill (which discards what it started).
//
// A waiting helper has done nothing but wait on its configuration socket: when the process
// holding the pool dies, the socket's other end closes and the helper exits with the
// sandbox-setup failure, having run nothing (TestPoolHelperEndsWithItsAgent).
type Pool[T any] struct {
	o       PoolOptions[T]
	mu      sync.Mutex
	idle    []T
	filling int
	closed  bool
	failed  time.Time
	running int        // background refills in flight
	ended   *sync.Cond // on mu: broadcast as a background refill ends
}

// MaxPoolSize bounds PoolOptions.Size (larger values are clamped to it): each waiting
// helper holds a process (and, for sessions, a PTY).
const MaxPoolSize = 16

// DefaultPoolRetry is how long a pool that failed to start waits before trying again (the
// caller then pays the full start and reports its refusal itself).
const DefaultPoolRetry = 5 * time.Second

// PoolOptions configure a Pool.
type PoolOptions[T any] struct {
	// Size is how many the pool keeps waiting (clamped to MaxPoolSize; ≤ 0: none).
	Size int
	// Start starts one (required).
	Start func() (T, error)
	// Discard kills and releases one that will not be used (required).
	Discard func(T)
	// Alive reports whether one is still waiting (nil: always).
	Alive func(T) bool
	// Busy reports whether a start is in progress: no refill begins while it is true
	// (nil: never busy).
	Busy func() bool
	// RetryAfter is the pause after a failed start (0: DefaultPoolRetry).
	RetryAfter time.Duration
}

// NewPool returns a pool, or nil when o.Size ≤ 0 (every method of a nil pool is a no-op
// and Take finds nothing).
func NewPool[T any](o PoolOptions[T]) *Pool[T] {
	if o.Size <= 0 {
		return nil
	}
	o.Size = min(o.Size, MaxPoolSize)
	if o.RetryAfter <= 0 {
		o.RetryAfter = DefaultPoolRetry
	}
	p := &Pool[T]{o: o}
	p.ended = sync.NewCond(&p.mu)
	return p
}

// waitRefills waits, with mu held, until no background refill runs.
func (p *Pool[T]) waitRefills() {
	for p.running > 0 {
		p.ended.Wait()
	}
}

// Size is the number the pool keeps waiting (0 for a nil pool).
func (p *Pool[T]) Size() int {
	if p == nil {
		return 0
	}
	return p.o.Size
}

// Idle returns what waits now, oldest first (for tests and reports; do not discard them).
func (p *Pool[T]) Idle() []T {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]T(nil), p.idle...)
}

// Filling is the number of starts a background refill still owes.
func (p *Pool[T]) Filling() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.filling
}

// Counts returns the number waiting and the number of starts a background refill still
// owes, read together (a refill's end moves one from filling to idle in one step).
func (p *Pool[T]) Counts() (idle, filling int) {
	if p == nil {
		return 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle), p.filling
}

// Take returns the oldest waiting one that is still alive, and false when none waits.
func (p *Pool[T]) Take() (T, bool) {
	var zero T
	if p == nil {
		return zero, false
	}
	for {
		p.mu.Lock()
		if p.closed || len(p.idle) == 0 {
			p.mu.Unlock()
			return zero, false
		}
		v := p.idle[0]
		p.idle[0] = zero
		p.idle = p.idle[1:]
		p.mu.Unlock()
		if p.o.Alive == nil || p.o.Alive(v) {
			return v, true
		}
		p.o.Discard(v) // killed from outside while it waited
	}
}

func (p *Pool[T]) busy() bool { return p.o.Busy != nil && p.o.Busy() }

// Refill starts, in the background, what the pool is missing — unless it is closed, full,
// busy, or a start failed less than RetryAfter ago. The background loop stops (and gives
// back what it still owed) as soon as a start begins.
func (p *Pool[T]) Refill() {
	if p == nil {
		return
	}
	p.mu.Lock()
	n := p.o.Size - len(p.idle) - p.filling
	if p.closed || n <= 0 || time.Since(p.failed) < p.o.RetryAfter || p.busy() {
		p.mu.Unlock()
		return
	}
	p.filling += n
	p.running++
	p.mu.Unlock()
	go func() {
		defer func() {
			p.mu.Lock()
			p.running--
			p.ended.Broadcast()
			p.mu.Unlock()
		}()
		for i := range n {
			if p.busy() {
				p.mu.Lock()
				p.filling -= n - i // a start began: the rest waits for the next idle moment
				p.mu.Unlock()
				return
			}
			v, err := p.o.Start()
			p.mu.Lock()
			p.filling--
			switch {
			case err != nil:
				p.failed = time.Now()
				p.filling -= n - i - 1
				p.mu.Unlock()
				return
			case p.closed:
				p.mu.Unlock()
				p.o.Discard(v)
				continue
			default:
				p.idle = append(p.idle, v)
			}
			p.mu.Unlock()
		}
	}()
}

// Warm returns once the pool is full: it waits for the background refills, then starts
// what is missing itself (whether or not the pool is busy), or returns the error of a
// start that failed. The agent warms at start so that the first start finds one;
// benchmarks warm so that no refill runs during a measurement.
func (p *Pool[T]) Warm() error {
	if p == nil {
		return nil
	}
	for {
		p.mu.Lock()
		p.waitRefills()
		if p.closed || len(p.idle) >= p.o.Size {
			p.mu.Unlock()
			return nil
		}
		p.mu.Unlock()
		v, err := p.o.Start()
		if err != nil {
			p.mu.Lock()
			p.failed = time.Now()
			p.mu.Unlock()
			return fmt.Errorf("procexec: pre-start a sandbox: %w", err)
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			p.o.Discard(v)
			return nil
		}
		p.idle = append(p.idle, v)
		p.mu.Unlock()
	}
}

// Close discards what waits, stops refilling and waits for an in-flight refill. Taken
// ones are not affected.
func (p *Pool[T]) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, v := range idle {
		p.o.Discard(v)
	}
	p.mu.Lock()
	p.waitRefills() // an in-flight refill discards what it started
	p.mu.Unlock()
}

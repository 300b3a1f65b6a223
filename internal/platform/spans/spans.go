// Package spans records when each step of an operation happened, across the components of
// one process (benchmark, manager, node agent, sandbox runner), so a benchmark can report
// where an operation's time goes as metrics rather than as logs read by eye.
//
// Nothing is recorded unless a Recorder is installed (benchmarks install one); Mark is
// then a single atomic load. An installed Recorder is bounded: it holds at most MaxOps
// operations of at most MaxSteps steps each and counts what it dropped at either cap.
package spans

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Caps of a Recorder.
const (
	// MaxOps is how many operations a Recorder holds at once (Take releases one).
	MaxOps = 4096
	// MaxSteps is how many distinct steps one operation records.
	MaxSteps = 64
)

// Point is one step of an operation: its name and the first time it was marked.
type Point struct {
	Step string
	At   time.Time
}

// Recorder holds the steps of operations by id.
type Recorder struct {
	mu      sync.Mutex
	ops     map[string][]Point
	dropped int
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{ops: map[string][]Point{}} }

var installed atomic.Pointer[Recorder]

// Install makes r the process's recorder (nil uninstalls) and returns the previous one.
func Install(r *Recorder) *Recorder { return installed.Swap(r) }

// Enabled says whether a Recorder is installed.
func Enabled() bool { return installed.Load() != nil }

// Mark records that step of operation id happened now. Only the first mark of a step
// counts (a retried pass does not move it); without an installed Recorder it does nothing.
func Mark(id, step string) {
	if r := installed.Load(); r != nil {
		r.mark(id, step, time.Now())
	}
}

// Marker returns a function that marks steps of id (nil without an installed Recorder, so
// callers can skip building ids when nothing records).
func Marker(id string) func(step string) {
	r := installed.Load()
	if r == nil {
		return nil
	}
	return func(step string) { r.mark(id, step, time.Now()) }
}

func (r *Recorder) mark(id, step string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pts, ok := r.ops[id]
	if !ok && len(r.ops) >= MaxOps {
		r.dropped++
		return
	}
	for _, p := range pts {
		if p.Step == step {
			return
		}
	}
	if len(pts) >= MaxSteps {
		r.dropped++
		return
	}
	r.ops[id] = append(pts, Point{Step: step, At: at})
}

// Take removes and returns the steps of id, in time order.
func (r *Recorder) Take(id string) []Point {
	r.mu.Lock()
	pts := r.ops[id]
	delete(r.ops, id)
	r.mu.Unlock()
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].At.Before(pts[j].At) })
	return pts
}

// Dropped is how many marks the caps refused.
func (r *Recorder) Dropped() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

package nodereport

import (
	"slices"
	"sync"
	"sync/atomic"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// Report holds what the node publishes about itself that no other component owns — the
// recovery actions of the start-up sweep, the number of pending waits, the data plane's
// endpoint, whether the Node is cordoned — under its own lock, and the capacity loop's
// kick. The heartbeat (Room.PublishLoop) and the capacity loop (Room.CapacityLoop) read it;
// recovery, the wait controller and the data plane write it, and the node reconciler
// (drain.go) sets the cordon.
type Report struct {
	// kick asks the capacity loop for a recount (one pending kick at most).
	kick chan struct{}
	// cordoned mirrors the Node's spec.unschedulable (kubectl drain; drain.go).
	cordoned atomic.Bool

	mu        sync.Mutex
	recovery  []wbv1.RecoveryAction
	waits     int
	dataPlane *wbv1.DataPlane
}

// Snapshot is a copy of the report, safe to use without its lock.
type Snapshot struct {
	Recovery  []wbv1.RecoveryAction
	Waits     int
	DataPlane *wbv1.DataPlane
}

// NewReport returns an empty report.
func NewReport() *Report { return &Report{kick: make(chan struct{}, 1)} }

// SetRecovery records the actions of the start-up sweep.
func (r *Report) SetRecovery(actions []wbv1.RecoveryAction) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recovery = slices.Clone(actions)
}

// SetWaits records the number of pending waits.
func (r *Report) SetWaits(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = n
}

// SetDataPlane records the data plane's published endpoint and CA.
func (r *Report) SetDataPlane(dp *wbv1.DataPlane) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dataPlane = dp.DeepCopy()
}

// Snapshot copies the report.
func (r *Report) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rec []wbv1.RecoveryAction
	for _, a := range r.recovery {
		rec = append(rec, *a.DeepCopy())
	}
	return Snapshot{Recovery: rec, Waits: r.waits, DataPlane: r.dataPlane.DeepCopy()}
}

// Kick asks the capacity loop to recount; it never blocks (kicks coalesce).
func (r *Report) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Cordoned says whether the node is cordoned (kubectl drain).
func (r *Report) Cordoned() bool { return r.cordoned.Load() }

// setCordoned records the cordon and returns the previous value.
func (r *Report) setCordoned(v bool) bool { return r.cordoned.Swap(v) }

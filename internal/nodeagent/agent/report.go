package agent

import (
	"slices"
	"sync"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// nodeReport holds what the node publishes about itself that no other component owns — the
// recovery actions of the start-up sweep, the number of pending waits, the data plane's
// endpoint — under its own lock, and the capacity loop's kick. The heartbeat (publishNode,
// node.go) and the capacity loop (free.go) read it; recovery, the wait controller and the
// data plane write it.
type nodeReport struct {
	// kick asks the capacity loop for a recount (one pending kick at most).
	kick chan struct{}

	mu        sync.Mutex
	recovery  []wbv1.RecoveryAction
	waits     int
	dataPlane *wbv1.DataPlane
}

// reportSnapshot is a copy of the report, safe to use without its lock.
type reportSnapshot struct {
	Recovery  []wbv1.RecoveryAction
	Waits     int
	DataPlane *wbv1.DataPlane
}

func newNodeReport() *nodeReport { return &nodeReport{kick: make(chan struct{}, 1)} }

// setRecovery records the actions of the start-up sweep.
func (r *nodeReport) setRecovery(actions []wbv1.RecoveryAction) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recovery = slices.Clone(actions)
}

// setWaits records the number of pending waits.
func (r *nodeReport) setWaits(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = n
}

// setDataPlane records the data plane's published endpoint and CA.
func (r *nodeReport) setDataPlane(dp *wbv1.DataPlane) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dataPlane = dp.DeepCopy()
}

// snapshot copies the report.
func (r *nodeReport) snapshot() reportSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rec []wbv1.RecoveryAction
	for _, a := range r.recovery {
		rec = append(rec, *a.DeepCopy())
	}
	return reportSnapshot{Recovery: rec, Waits: r.waits, DataPlane: r.dataPlane.DeepCopy()}
}

// kickCapacity asks the capacity loop to recount; it never blocks (kicks coalesce).
func (r *nodeReport) kickCapacity() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

package nodereport

import (
	"sync"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// A snapshot is a copy: changing it, or the values set, changes nothing the report holds.
func TestNodeReportSnapshotIsACopy(t *testing.T) {
	r := NewReport()
	actions := []wbv1.RecoveryAction{{Outcome: "cleaned"}}
	dp := &wbv1.DataPlane{Endpoint: "127.0.0.1:1", CABundle: "ca"}
	r.SetRecovery(actions)
	r.SetDataPlane(dp)
	r.SetWaits(3)
	actions[0].Outcome, dp.Endpoint = "changed", "changed"
	s := r.Snapshot()
	if len(s.Recovery) != 1 || s.Recovery[0].Outcome != "cleaned" || s.DataPlane.Endpoint != "127.0.0.1:1" || s.Waits != 3 {
		t.Fatalf("snapshot %+v reflects a caller's later change", s)
	}
	s.Recovery[0].Outcome, s.DataPlane.Endpoint = "changed", "changed"
	if again := r.Snapshot(); again.Recovery[0].Outcome != "cleaned" || again.DataPlane.Endpoint != "127.0.0.1:1" {
		t.Fatalf("changing a snapshot changed the report: %+v", again)
	}
}

// Writers and the publishers' snapshots run concurrently under the report's own lock (run
// with -race).
func TestNodeReportConcurrent(t *testing.T) {
	r := NewReport()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := range 200 {
				r.SetWaits(i*1000 + j)
				r.SetRecovery([]wbv1.RecoveryAction{{Outcome: "cleaned"}})
				r.SetDataPlane(&wbv1.DataPlane{Endpoint: "e"})
				r.Kick()
			}
		}()
		go func() {
			defer wg.Done()
			for range 200 {
				_ = r.Snapshot()
			}
		}()
	}
	wg.Wait()
	if s := r.Snapshot(); len(s.Recovery) != 1 || s.DataPlane == nil {
		t.Fatalf("final snapshot %+v", s)
	}
}

// Kicks never block and coalesce into one pending recount.
func TestNodeReportKicksCoalesce(t *testing.T) {
	r := NewReport()
	for range 5 {
		r.Kick()
	}
	<-r.kick
	select {
	case <-r.kick:
		t.Fatal("five kicks left more than one recount pending")
	default:
	}
}

package nodereport

import (
	"context"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/statusapply"
)

// The node's free capacity in WorkbenchNode status.free: counted from the agent's own
// state whenever a reconcile pass may have changed it (Report.Kick), written only when it
// changed and at most once per capacity interval, so a burst of sessions costs one write
// per interval and the last state is always published. Admission reads it to refuse early
// what the node would refuse; the node stays the authority (openSession still counts).

// DefaultCapacityInterval bounds how often status.free is written.
const DefaultCapacityInterval = time.Second

// maxFullEnvironments bounds status.free.fullEnvironments (the schema's MaxItems).
const maxFullEnvironments = 64

// slotReporter is a backend with a bounded number of VMs (qemu-microvm.v1).
type slotReporter interface {
	Slots() (used, limit int)
}

// freeCapacity counts what one more session, reader, command, wait or VM would find.
func (r *Room) freeCapacity() wbv1.NodeFree {
	caps := r.d.Caps
	open, perEnv := r.d.OpenSessions()
	waits := r.d.Report.Snapshot().Waits
	var full []wbv1.NodeEnvironmentRef
	truncated := false
	for uid, n := range perEnv {
		if n < caps.SessionsPerEnvironment {
			continue
		}
		ns, name, ok := strings.Cut(r.d.EnvironmentRef(uid), "/")
		if !ok {
			continue
		}
		if len(full) == maxFullEnvironments {
			truncated = true
			continue
		}
		full = append(full, wbv1.NodeEnvironmentRef{Namespace: ns, Name: wbv1.ObjectName(name)})
	}
	sort.Slice(full, func(i, j int) bool {
		if full[i].Namespace != full[j].Namespace {
			return full[i].Namespace < full[j].Namespace
		}
		return full[i].Name < full[j].Name
	})
	nonNeg := func(v int) int32 { return int32(max(v, 0)) }
	f := wbv1.NodeFree{
		Sessions:         nonNeg(caps.Sessions - open),
		ReaderTasks:      nonNeg(caps.ReaderTasks - r.d.Readers()),
		Commands:         nonNeg(caps.ConcurrentCommands - r.d.RunningCommands()),
		Waits:            nonNeg(caps.PendingWaits - waits),
		FullEnvironments: full, FullEnvironmentsTruncated: truncated,
	}
	used, limit, hasVMs := 0, 0, false
	for _, id := range r.d.Backends.IDs() {
		b, _ := r.d.Backends.Get(id)
		if sr, ok := b.(slotReporter); ok {
			u, l := sr.Slots()
			used, limit, hasVMs = used+u, limit+l, true
		}
	}
	if hasVMs {
		v := nonNeg(limit - used)
		f.VMs = &v
	}
	return f
}

// CapacityLoop publishes status.free on change, rate-bounded, until ctx ends.
func (r *Room) CapacityLoop(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	interval := DefaultCapacityInterval
	if r.d.CapacityInterval > 0 {
		interval = r.d.CapacityInterval
	}
	var last *wbv1.NodeFree
	r.d.Report.Kick()
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.d.Report.kick:
		}
		f := r.freeCapacity()
		if last == nil || !equality.Semantic.DeepEqual(*last, f) {
			published := f
			published.ObservedTime = metav1.Now()
			node := &wbv1.WorkbenchNode{ObjectMeta: metav1.ObjectMeta{Name: r.d.NodeName}}
			if _, err := statusapply.Apply(ctx, r.d.Client, nodekit.FieldManager+"capacity", node, nil, wbv1.WorkbenchNodeStatus{Free: &published}); err != nil {
				// The WorkbenchNode may not exist yet (the heartbeat creates it): retry
				// after the interval.
				log.V(1).Info("Publishing free capacity; retrying", "error", err.Error())
				r.d.Report.Kick()
			} else {
				last = &f
			}
		}
		// Rate bound: the next count comes no sooner than interval from now; kicks
		// meanwhile coalesce into one.
		t.Reset(interval)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

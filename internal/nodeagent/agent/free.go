package agent

import (
	"context"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/statusapply"
)

// The node's free capacity in WorkbenchNode status.free: counted from the agent's own
// state whenever a reconcile pass may have changed it (kickCapacity), written only when it
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

// kickCapacity asks the capacity loop to recount; it never blocks.
func (a *Agent) kickCapacity() { a.report.kickCapacity() }

// freeCapacity counts what one more session, reader, command, wait or VM would find.
func (a *Agent) freeCapacity() wbv1.NodeFree {
	caps := a.cfg.Caps
	open, perEnv := a.sess.OpenCounts()
	guest := a.commands.GuestRunning()
	waits := a.report.snapshot().Waits
	var full []wbv1.NodeEnvironmentRef
	truncated := false
	for uid, n := range perEnv {
		if n < caps.SessionsPerEnvironment {
			continue
		}
		ns, name, ok := strings.Cut(a.envs.Ref(uid), "/")
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
		ReaderTasks:      nonNeg(caps.ReaderTasks - a.sessions.Readers()),
		Commands:         nonNeg(caps.ConcurrentCommands - a.runner.Running() - guest),
		Waits:            nonNeg(caps.PendingWaits - waits),
		FullEnvironments: full, FullEnvironmentsTruncated: truncated,
	}
	used, limit, hasVMs := 0, 0, false
	for _, id := range a.backends.IDs() {
		b, _ := a.backends.Get(id)
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

// capacityLoop publishes status.free on change, rate-bounded, until ctx ends.
func (a *Agent) capacityLoop(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	interval := DefaultCapacityInterval
	if a.cfg.CapacityPublishMillis > 0 {
		interval = time.Duration(a.cfg.CapacityPublishMillis) * time.Millisecond
	}
	var last *wbv1.NodeFree
	a.kickCapacity()
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.report.kick:
		}
		f := a.freeCapacity()
		if last == nil || !equality.Semantic.DeepEqual(*last, f) {
			published := f
			published.ObservedTime = metav1.Now()
			node := &wbv1.WorkbenchNode{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName}}
			if _, err := statusapply.Apply(ctx, a.client, FieldManager+"capacity", node, nil, wbv1.WorkbenchNodeStatus{Free: &published}); err != nil {
				// The WorkbenchNode may not exist yet (the heartbeat creates it): retry
				// after the interval.
				log.V(1).Info("Publishing free capacity; retrying", "error", err.Error())
				a.kickCapacity()
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

package commands

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// A command admitted while every one of the node's concurrent-command slots is taken waits
// for a slot instead of being refused: a burst of commands larger than the cap runs as the
// slots free up. The wait is bounded: at most maxSlotWaiters commands wait, none longer
// than maxSlotWait after its creation; past either bound the start refuses it
// command-cap-reached, as before. A waiting command has nothing decided or written: its
// pass ends with a requeue, and a slot freed wakes the longest-waiting one (slotRecheck is
// the fallback should a wake be lost).
const (
	maxSlotWaiters = 4096
	maxSlotWait    = 5 * time.Minute
	slotRecheck    = 5 * time.Second
)

// slotWaiters is the FIFO of the commands waiting for a slot (bounded by maxSlotWaiters).
type slotWaiters struct {
	mu    sync.Mutex
	order []client.ObjectKey
	in    map[client.ObjectKey]bool
}

// wait adds k (once) and reports whether it may wait: false when the queue is full.
func (q *slotWaiters) wait(k client.ObjectKey) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.in == nil {
		q.in = map[client.ObjectKey]bool{}
	}
	if q.in[k] {
		return true
	}
	if len(q.in) >= maxSlotWaiters {
		return false
	}
	q.in[k] = true
	q.order = append(q.order, k)
	return true
}

// done removes k (it got a slot, or stopped waiting).
func (q *slotWaiters) done(k client.ObjectKey) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.in, k)
}

// next pops the longest-waiting key still waiting.
func (q *slotWaiters) next() (client.ObjectKey, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) > 0 {
		k := q.order[0]
		q.order = q.order[1:]
		if q.in[k] {
			return k, true
		}
	}
	q.order = nil // drop the backing array once drained
	return client.ObjectKey{}, false
}

// reserveSlot takes a concurrent-command slot for p's command. ok false: none is free and
// the command waits (its pass requeues, nothing is written). A command that may not wait
// (waited maxSlotWait already, or maxSlotWaiters wait) goes on without a slot and its start
// is refused at the cap.
func (r *Room) reserveSlot(p *cmdPass) (ok bool) {
	k := client.ObjectKeyFromObject(p.cmd)
	slot, free := r.d.Runner.Reserve()
	if free {
		r.waiters.done(k)
		p.slot = slot
		return true
	}
	if time.Since(p.cmd.CreationTimestamp.Time) < maxSlotWait && r.waiters.wait(k) {
		markCommand(p.cmd, "node-waits-for-a-slot")
		p.result.RequeueAfter = slotRecheck
		return false
	}
	r.waiters.done(k)
	return true
}

// releaseSlot gives back a reserved slot no start used, and wakes a waiter for it.
func (r *Room) releaseSlot(p *cmdPass) {
	if p.slot.Release() {
		r.slotFreed()
	}
}

// slotFreed wakes the longest-waiting command: a slot is free.
func (r *Room) slotFreed() {
	if k, ok := r.waiters.next(); ok {
		cmd := &wbv1.TerminalCommand{}
		cmd.Namespace, cmd.Name = k.Namespace, k.Name
		r.d.Wake(cmd)
	}
}

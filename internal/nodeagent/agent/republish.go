package agent

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// pendingResync bounds how long a command or session bound to this node that has no outcome
// can go without a pass. Every wake-up of the node is an event (a watch event of the object
// or of what it references, or an explicit wake from the pass that made something available
// in this process); one that is missed — a status write that failed after the in-process
// state changed, a wake sent while a pass was between its check and its return — would
// otherwise leave the object unvisited until the next restart. The resync makes a missed
// wake-up cost at most this long, by construction: every agent start and every resync
// enqueues every command and session of this node that lacks an outcome. A pass of an
// object with nothing to do writes nothing.
const pendingResync = 30 * time.Second

// pendingLoop wakes every pending command and session of this node at start (once the
// cache has synced: a cache read waits for it) and every pendingResync after.
func (a *Agent) pendingLoop(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		woken, err := a.WakePending(ctx)
		if err != nil {
			log.Error(err, "Waking pending commands and sessions; retried at the next resync")
		} else if len(woken) > 0 {
			log.V(1).Info("Woke pending commands and sessions", "objects", len(woken))
		}
		t.Reset(pendingResync)
	}
}

// WakePending enqueues every command bound to this node that has no outcome and every
// session of this node that is not over, whatever events were seen, and returns their keys
// ("TerminalCommand ns/name", "TerminalSession ns/name"). The node's cache holds only this
// node's objects; the label is checked again here.
func (a *Agent) WakePending(ctx context.Context) ([]string, error) {
	var cmds wbv1.TerminalCommandList
	if err := a.client.List(ctx, &cmds); err != nil {
		return nil, fmt.Errorf("listing the commands of node %s: %w", a.cfg.NodeName, err)
	}
	woken, more := wakeBound(ctx, a, a.wakeCommands, "TerminalCommand", cmds.Items, nil,
		func(c *wbv1.TerminalCommand) bool { return wbv1.CommandIsFinal(c.Status.Conditions) })
	if !more {
		return woken, nil
	}
	var sessions wbv1.TerminalSessionList
	if err := a.client.List(ctx, &sessions); err != nil {
		return woken, fmt.Errorf("listing the sessions of node %s: %w", a.cfg.NodeName, err)
	}
	woken, _ = wakeBound(ctx, a, a.wakeSessions, "TerminalSession", sessions.Items, woken,
		func(s *wbv1.TerminalSession) bool { return wbv1.SessionPhaseIsFinal(s.Status.Phase) })
	return woken, nil
}

// wakeBound wakes on ch every item of kind bound to this node (by its label) that is not
// over, appending "kind ns/name" to woken. more is false when ctx ended before all were woken.
func wakeBound[T any, PT interface {
	*T
	client.Object
}](ctx context.Context, a *Agent, ch chan event.GenericEvent, kind string, items []T, woken []string, over func(PT) bool) (_ []string, more bool) {
	for i := range items {
		o := PT(&items[i])
		if o.GetLabels()[wbv1.NodeLabel] != a.cfg.NodeName || over(o) {
			continue
		}
		if ctx.Err() != nil {
			return woken, false
		}
		a.wake(ch, o)
		woken = append(woken, kind+" "+o.GetNamespace()+"/"+o.GetName())
	}
	return woken, true
}

// republishOutcomes is the command room's store→status reconciliation
// (commands.Room.Republish), run on every sweep of the retention loop.
func (a *Agent) republishOutcomes(ctx context.Context) (int, error) {
	if a.cmds == nil {
		return 0, nil // not set up yet
	}
	return a.cmds.Republish(ctx)
}

package agent

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

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
	var woken []string
	var cmds wbv1.TerminalCommandList
	if err := a.client.List(ctx, &cmds); err != nil {
		return nil, fmt.Errorf("listing the commands of node %s: %w", a.cfg.NodeName, err)
	}
	for i := range cmds.Items {
		c := &cmds.Items[i]
		if c.Labels[wbv1.NodeLabel] != a.cfg.NodeName || wbv1.CommandIsFinal(c.Status.Conditions) {
			continue
		}
		if ctx.Err() != nil {
			return woken, nil
		}
		a.wake(a.wakeCommands, c)
		woken = append(woken, "TerminalCommand "+c.Namespace+"/"+c.Name)
	}
	var sessions wbv1.TerminalSessionList
	if err := a.client.List(ctx, &sessions); err != nil {
		return woken, fmt.Errorf("listing the sessions of node %s: %w", a.cfg.NodeName, err)
	}
	for i := range sessions.Items {
		s := &sessions.Items[i]
		if s.Labels[wbv1.NodeLabel] != a.cfg.NodeName || wbv1.SessionPhaseIsFinal(s.Status.Phase) {
			continue
		}
		if ctx.Err() != nil {
			return woken, nil
		}
		a.wake(a.wakeSessions, s)
		woken = append(woken, "TerminalSession "+s.Namespace+"/"+s.Name)
	}
	return woken, nil
}

// republishOutcomes is the command room's store→status reconciliation
// (commands.Room.Republish), run on every sweep of the retention loop.
func (a *Agent) republishOutcomes(ctx context.Context) (int, error) {
	if a.cmds == nil {
		return 0, nil // not set up yet
	}
	return a.cmds.Republish(ctx)
}

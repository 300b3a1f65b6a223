package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/store"
)

// republishOutcomes is the store→status reconciliation: every command the store holds a
// record of, whose object (same UID) this node's cache shows without an outcome, and that
// no pass of this process is running, is woken. Its pass publishes the stored outcome (or
// records it interrupted when the store has none: a previous process started it), so a
// command can never stay Running in the API while the node knows how it ended — whatever
// status write was lost (an agent killed between its store write and its status write, a
// write that failed) or replaced. It runs on every sweep of the retention loop, the first
// one right after start-up. It returns how many commands it woke.
func (a *Agent) republishOutcomes(ctx context.Context) (int, error) {
	recs, err := a.store.Commands().List(0)
	if err != nil {
		return 0, fmt.Errorf("listing command records of node %s: %w", a.cfg.NodeName, err)
	}
	woken := 0
	for _, r := range recs {
		if ctx.Err() != nil {
			return woken, nil
		}
		if a.commands.Has(r.UID) {
			continue // this process runs it (or holds its outcome): its own passes write it
		}
		var cmd wbv1.TerminalCommand
		if err := a.client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, &cmd); err != nil {
			if client.IgnoreNotFound(err) != nil {
				return woken, fmt.Errorf("reading command %s/%s: %w", r.Namespace, r.Name, err)
			}
			continue // gone, or an ActionRun's record (same table): nothing to publish here
		}
		if string(cmd.UID) != r.UID || wbv1.CommandIsFinal(cmd.Status.Conditions) {
			continue
		}
		a.wake(a.wakeCommands, &cmd)
		woken++
	}
	return woken, nil
}

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

// storeDecision stores an outcome the node decided for a command it never started (a
// refusal, a cancellation before the start) as the command's one record, before status
// shows it. A restart, or a status write that was lost, then republishes that decision
// (republishOutcomes, and the command's next pass reading the store) instead of deciding
// again under changed circumstances: exactly one recorded outcome. The record holds no
// idempotency key: a command that never ran answers for no other.
func (a *Agent) storeDecision(cmd *wbv1.TerminalCommand, o *commandOutcome) error {
	if o == nil {
		return nil
	}
	raw, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encoding the node's decision on command %s/%s: %w", cmd.Namespace, cmd.Name, err)
	}
	rec, created, err := a.store.RecordCommandStart(store.Command{UID: string(cmd.UID), Namespace: cmd.Namespace, Name: cmd.Name,
		ArgvDigest: argvDigestOf(cmd), Phase: string(o.Phase), Outcome: string(raw)})
	if err != nil {
		return fmt.Errorf("storing the node's decision on command %s/%s: %w", cmd.Namespace, cmd.Name, err)
	}
	if !created {
		// A record exists (it cannot while this pass found none, short of another process
		// on the same store): it is the command's one outcome; the next pass publishes it.
		return fmt.Errorf("command %s/%s already has a store record (%s): its next pass publishes that one", cmd.Namespace, cmd.Name, rec.Phase)
	}
	return nil
}

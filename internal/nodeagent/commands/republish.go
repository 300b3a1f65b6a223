package commands

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/store"
)

// Republish is the store→status reconciliation: every command the store holds a
// record of, whose object (same UID) this node's cache shows without an outcome, and that
// no pass of this process is running, is woken. Its pass publishes the stored outcome (or
// records it interrupted when the store has none: a previous process started it), so a
// command can never stay Running in the API while the node knows how it ended — whatever
// status write was lost (an agent killed between its store write and its status write, a
// write that failed) or replaced. It runs on every sweep of the retention loop, the first
// one right after start-up. It returns how many commands it woke.
func (r *Room) Republish(ctx context.Context) (int, error) {
	recs, err := r.d.Store.Commands().List(0)
	if err != nil {
		return 0, fmt.Errorf("listing command records of node %s: %w", r.d.NodeName, err)
	}
	woken := 0
	for _, rec := range recs {
		if ctx.Err() != nil {
			return woken, nil
		}
		if r.d.Table.Has(rec.UID) {
			continue // this process runs it (or holds its outcome): its own passes write it
		}
		var cmd wbv1.TerminalCommand
		if err := r.d.Client.Get(ctx, types.NamespacedName{Namespace: rec.Namespace, Name: rec.Name}, &cmd); err != nil {
			if client.IgnoreNotFound(err) != nil {
				return woken, fmt.Errorf("reading command %s/%s: %w", rec.Namespace, rec.Name, err)
			}
			continue // gone, or an ActionRun's record (same table): nothing to publish here
		}
		if string(cmd.UID) != rec.UID || wbv1.CommandIsFinal(cmd.Status.Conditions) {
			continue
		}
		r.d.Wake(&cmd)
		woken++
	}
	return woken, nil
}

// storeDecision stores an outcome the node decided for a command it never started (a
// refusal, a cancellation before the start) as the command's one record, before status
// shows it. A restart, or a status write that was lost, then republishes that decision
// (republishOutcomes, and the command's next pass reading the store) instead of deciding
// again under changed circumstances: exactly one recorded outcome. The record holds no
// idempotency key: a command that never ran answers for no other.
func (r *Room) storeDecision(cmd *wbv1.TerminalCommand, o *Outcome) error {
	if o == nil {
		return nil
	}
	raw, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encoding the node's decision on command %s/%s: %w", cmd.Namespace, cmd.Name, err)
	}
	rec, created, err := r.d.Store.RecordCommandStart(store.Command{UID: string(cmd.UID), Namespace: cmd.Namespace, Name: cmd.Name,
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

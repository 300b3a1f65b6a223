package agent

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
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
		if a.commands.has(r.UID) {
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

package agent

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// The node's cordon (kubectl drain) is followed by the node report room
// (internal/nodeagent/nodereport, drain.go); these are the agent's parts of a drain: the
// re-queue of what the node holds when the cordon changes, and the flag on the commands an
// environment's drain interrupts.

// wakeNodeBound re-queues every environment and session bound to this node.
func (a *Agent) wakeNodeBound(ctx context.Context) {
	var envs wbv1.EnvironmentList
	if err := a.client.List(ctx, &envs, client.MatchingLabels{wbv1.NodeLabel: a.cfg.NodeName}); err == nil {
		for i := range envs.Items {
			a.wake(a.wakeEnvironments, &envs.Items[i])
		}
	}
	var sessions wbv1.TerminalSessionList
	if err := a.client.List(ctx, &sessions, client.MatchingLabels{wbv1.NodeLabel: a.cfg.NodeName}); err == nil {
		for i := range sessions.Items {
			a.wake(a.wakeSessions, &sessions.Items[i])
		}
	}
}

// markDrained flags the running commands of an environment so their end is recorded as
// interrupted by the drain, not cancelled by a user.
func (a *Agent) markDrained(envUID string) {
	a.commands.View(func(runs map[string]*liveCommand) {
		for _, lc := range runs {
			if lc.Result == nil && lc.EnvUID == envUID {
				lc.Drained = true
			}
		}
	})
}

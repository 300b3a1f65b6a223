package agent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// `kubectl drain` of the agent's node (docs/capacity.md "Draining a node"): drain cordons the
// node (spec.unschedulable) and evicts its pods but not the DaemonSet's, so the agent stays
// and acts on the cordon itself:
//
//   - every running command of the node is stopped and ends Failed/interrupted;
//   - every open session ends Failed/interrupted, a session asked for meanwhile is refused
//     with node-draining;
//   - every environment is drained through its backend (Drain), then torn down (Teardown:
//     VMs stopped, fixture copies removed, host directories untouched); its Ready condition
//     is False with reason Draining, and artifacts are kept (spec.teardown applies when the
//     Environment is deleted);
//   - the WorkbenchNode reports Draining=True.
//
// `kubectl uncordon` restores: environments are allocated again (a VM boots anew, a copy is
// made anew), Draining=False, and new sessions and commands run. Sessions and commands that
// ended stay ended.

// ConditionDraining on a WorkbenchNode says the node is cordoned and the agent drained it.
const ConditionDraining = "Draining"

// nodeReconciler follows the agent's own Node object.
type nodeReconciler struct{ a *Agent }

// RBAC: config/rbac/node_agent_role.yaml grants get/list/watch on nodes (hand-written role).

func (r *nodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.a
	if req.Name != a.cfg.NodeName {
		return ctrl.Result{}, nil
	}
	var n corev1.Node
	cordoned := false
	if err := a.client.Get(ctx, req.NamespacedName, &n); err == nil {
		cordoned = n.Spec.Unschedulable
	} else if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("reading Node %s: %w", req.Name, err)
	}
	if a.cordoned.Swap(cordoned) == cordoned {
		return ctrl.Result{}, nil
	}
	ctrl.LoggerFrom(ctx).Info("Node cordon changed: draining or restoring this node's environments and sessions", "cordoned", cordoned)
	a.wakeNodeBound(ctx)
	if err := a.publishNode(ctx); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Publishing WorkbenchNode after the cordon changed; the next heartbeat retries")
	}
	return ctrl.Result{}, nil
}

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

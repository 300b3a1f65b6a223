package nodereport

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
type nodeReconciler struct{ r *Room }

// RBAC: config/rbac/node_agent_role.yaml grants get/list/watch on nodes (hand-written role).

func (r *nodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ro := r.r
	if req.Name != ro.d.NodeName {
		return ctrl.Result{}, nil
	}
	var n corev1.Node
	cordoned := false
	if err := ro.d.Client.Get(ctx, req.NamespacedName, &n); err == nil {
		cordoned = n.Spec.Unschedulable
	} else if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("reading Node %s: %w", req.Name, err)
	}
	if ro.d.Report.setCordoned(cordoned) == cordoned {
		return ctrl.Result{}, nil
	}
	ctrl.LoggerFrom(ctx).Info("Node cordon changed: draining or restoring this node's environments and sessions", "cordoned", cordoned)
	ro.d.CordonChanged(ctx)
	if err := ro.publishNode(ctx); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Publishing WorkbenchNode after the cordon changed; the next heartbeat retries")
	}
	return ctrl.Result{}, nil
}

package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// SessionCapacityReconciler tells a client when to retry a session the node refused for
// its caps: on a TerminalSession that ended Failed with session-cap-reached it keeps the
// condition CapacityAvailable, False while the node's published free capacity (WorkbenchNode
// status.free) has no slot for the session's environment, True from the moment it has one
// (lastTransitionTime says when capacity returned). The refused session itself stays Failed:
// a retry is a new session, which the node may still refuse if another client was faster.
type SessionCapacityReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=terminalsessions,verbs=get;list;watch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=terminalsessions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=workbenchnodes,verbs=get;list;watch

func refusedForCapacity(s *wbv1.TerminalSession) bool {
	return s.Status.Phase == wbv1.SessionFailed && s.Status.Refusal != nil && s.Status.Refusal.Code == string(actuation.CodeSessionCapReached)
}

// Reconcile implements reconcile.Reconciler.
func (r *SessionCapacityReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var s wbv1.TerminalSession
	if err := r.Get(ctx, req.NamespacedName, &s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !refusedForCapacity(&s) || !s.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	nodeName := s.Status.NodeName
	if nodeName == "" {
		nodeName = s.Labels[wbv1.NodeLabel]
	}
	if nodeName == "" {
		return ctrl.Result{}, nil
	}
	var node wbv1.WorkbenchNode
	if err := r.Get(ctx, types.NamespacedName{Name: nodeName}, &node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if node.Status.Free == nil {
		return ctrl.Result{}, nil // an agent that publishes no free capacity: nothing to say
	}
	c := cond(wbv1.ConditionCapacityAvailable, true, "CapacityReturned",
		fmt.Sprintf("node %s has %d free session slots (counted at %s): create a new session to retry",
			nodeName, node.Status.Free.Sessions, node.Status.Free.ObservedTime.UTC().Format("2006-01-02T15:04:05Z")), s.Generation)
	if why := node.NoSessionRoom(s.Namespace, string(s.Spec.EnvironmentRef)); why != "" {
		c = cond(wbv1.ConditionCapacityAvailable, false, "CapacityExhausted", why, s.Generation)
	} else if !meta.IsStatusConditionTrue(node.Status.Conditions, wbv1.ConditionReady) {
		c = cond(wbv1.ConditionCapacityAvailable, false, "NodeNotReady", "node "+nodeName+" is not Ready", s.Generation)
	}
	cur := wbv1.TerminalSessionStatus{Conditions: ownedConditions(s.Status.Conditions, wbv1.ConditionCapacityAvailable)}
	next := wbv1.TerminalSessionStatus{Conditions: ownedConditions(s.Status.Conditions, wbv1.ConditionCapacityAvailable)}
	all := append(s.Status.Conditions[:0:0], s.Status.Conditions...)
	setCondition(&next.Conditions, &all, c)
	_, err := applyStatus(ctx, r.Client, "capacity", &s, cur, next)
	return ctrl.Result{}, err
}

// SetupWithManager watches refused sessions and the WorkbenchNodes whose free capacity
// decides their condition.
func (r *SessionCapacityReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&wbv1.TerminalSession{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			s, ok := o.(*wbv1.TerminalSession)
			return ok && refusedForCapacity(s)
		}))).
		Watches(&wbv1.WorkbenchNode{}, handler.EnqueueRequestsFromMapFunc(r.refusedOn)).
		Named("terminalsession-capacity").Complete(r)
}

// refusedOn maps a WorkbenchNode change to the sessions refused for capacity on it.
func (r *SessionCapacityReconciler) refusedOn(ctx context.Context, o client.Object) []reconcile.Request {
	var list wbv1.TerminalSessionList
	if err := r.List(ctx, &list, client.MatchingLabels{wbv1.NodeLabel: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the sessions of node", "node", o.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if refusedForCapacity(&list.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

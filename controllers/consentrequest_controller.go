package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// ConsentRequestReconciler runs the consent lifecycle: Pending until a grant decides it
// (Granted or Denied), Expired when the timeout passes first (fail closed), Revoked when the
// granting decision is revoked.
type ConsentRequestReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Now      func() time.Time
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=consentrequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=consentrequests/status,verbs=get;update;patch

func consentRequestOwned(s *wbv1.ConsentRequestStatus) wbv1.ConsentRequestStatus {
	return wbv1.ConsentRequestStatus{
		Decision: s.Decision, ApprovalRef: s.ApprovalRef, GrantRef: s.GrantRef, ExpiresAt: s.ExpiresAt, DecidedAt: s.DecidedAt,
		ObservedGeneration: s.ObservedGeneration, Conditions: ownedConditions(s.Conditions, wbv1.ConditionDecided),
	}
}

// Reconcile implements reconcile.Reconciler.
func (r *ConsentRequestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cr wbv1.ConsentRequest
	if err := r.Get(ctx, req.NamespacedName, &cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cur := consentRequestOwned(&cr.Status)
	next := consentRequestOwned(&cr.Status)
	all := append([]metav1.Condition(nil), cr.Status.Conditions...)
	now := r.Now()
	expiry := cr.CreationTimestamp.Add(time.Duration(cr.Spec.TimeoutSeconds) * time.Second)
	next.ExpiresAt = &metav1.Time{Time: expiry}
	next.ObservedGeneration = cr.Generation
	var result ctrl.Result

	decision := wbv1.ConsentDecisionFor(all)
	if decision == wbv1.DecisionPending || decision == wbv1.DecisionGranted {
		var grants wbv1.ConsentGrantList
		if err := r.List(ctx, &grants, client.InNamespace(cr.Namespace), client.MatchingFields{indexGrantRequest: cr.Name}); err != nil {
			return ctrl.Result{}, fmt.Errorf("listing grants of %s: %w", req, err)
		}
		slices.SortFunc(grants.Items, func(a, b wbv1.ConsentGrant) int {
			if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
				return c
			}
			return compareStrings(a.Name, b.Name)
		})
		switch {
		case len(grants.Items) > 0:
			g := &grants.Items[0]
			newDecision := wbv1.DecisionGranted
			switch {
			case g.Spec.Scope == wbv1.ConsentDeny:
				newDecision = wbv1.DecisionDenied
			case g.Spec.Revoked != nil && *g.Spec.Revoked:
				newDecision = wbv1.DecisionRevoked
			}
			_, approvalRef := grantApproval(g, &cr)
			next.GrantRef, next.ApprovalRef = g.Name, approvalRef
			if decision != newDecision {
				next.DecidedAt = &metav1.Time{Time: now}
			}
			setCondition(&next.Conditions, &all, cond(wbv1.ConditionDecided, true, string(newDecision),
				fmt.Sprintf("%s by %s (%s)", newDecision, g.Spec.Operator, g.Spec.Scope), cr.Generation))
		case decision == wbv1.DecisionPending && !now.Before(expiry):
			next.DecidedAt = &metav1.Time{Time: now}
			setCondition(&next.Conditions, &all, cond(wbv1.ConditionDecided, true, string(wbv1.DecisionExpired),
				"no operator decided before the timeout; failing closed", cr.Generation))
		case decision == wbv1.DecisionPending:
			setCondition(&next.Conditions, &all, cond(wbv1.ConditionDecided, false, string(wbv1.DecisionPending), "waiting for an operator", cr.Generation))
			result.RequeueAfter = requeueAt(now, expiry)
		}
	}
	next.Decision = wbv1.ConsentDecisionFor(all)
	wrote, err := applyStatus(ctx, r.Client, "consentrequest", &cr, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote && cur.Decision != next.Decision {
		phaseTransitions.WithLabelValues("ConsentRequest", string(next.Decision)).Inc()
		r.Recorder.Eventf(&cr, nil, corev1.EventTypeNormal, "Consent"+string(next.Decision), "Decide", "Consent request is %s", next.Decision)
	}
	return result, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// SetupWithManager registers the controller; grants wake the request they decide.
func (r *ConsentRequestReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &wbv1.ConsentGrant{}, indexGrantRequest, func(o client.Object) []string {
		return []string{string(o.(*wbv1.ConsentGrant).Spec.RequestRef)}
	}); err != nil {
		return fmt.Errorf("indexing grants by request: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&wbv1.ConsentRequest{}).
		Watches(&wbv1.ConsentGrant{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			g := o.(*wbv1.ConsentGrant)
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: g.Namespace, Name: string(g.Spec.RequestRef)}}}
		})).
		Named("consentrequest").
		Complete(r)
}

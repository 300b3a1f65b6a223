package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// ConsentRequestReconciler runs the consent lifecycle: Pending until a grant decides it
// (Granted or Denied), Expired when the timeout passes first (fail closed), Revoked when the
// granting decision is revoked.
type ConsentRequestReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Now      func() time.Time
	// Cooldown remembers denied argv per identity (shared with the command controller).
	Cooldown *actuation.DenyCooldown
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=consentrequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=consentrequests/status,verbs=get;update;patch

func consentRequestOwned(s *wbv1.ConsentRequestStatus) wbv1.ConsentRequestStatus {
	return wbv1.ConsentRequestStatus{
		Decision: s.Decision, ApprovalRef: s.ApprovalRef, GrantRef: s.GrantRef, ExpiresAt: s.ExpiresAt, DecidedAt: s.DecidedAt,
		ObservedGeneration: s.ObservedGeneration, Conditions: ownedConditions(s.Conditions, wbv1.ConditionDecided, wbv1.ConditionReconciling, wbv1.ConditionStalled),
	}
}

// Reconcile implements reconcile.Reconciler.
func (r *ConsentRequestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cr wbv1.ConsentRequest
	if err := r.Get(ctx, req.NamespacedName, &cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if err := rememberDenial(ctx, r.Client, r.Cooldown, &cr); err != nil {
		return ctrl.Result{}, err
	}
	if gone, res, err := r.collect(ctx, &cr); err != nil || gone {
		return res, err
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
		grants.Items = slices.DeleteFunc(grants.Items, func(g wbv1.ConsentGrant) bool { return !answers(&g, &cr) })
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
	for _, hc := range wbv1.HealthConditions(wbv1.ConsentRequestHealth(next.Decision), string(next.Decision), "consent request is "+string(next.Decision), cr.Generation) {
		setCondition(&next.Conditions, &all, hc)
	}
	wrote, err := applyStatus(ctx, r.Client, "consentrequest", &cr, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote && cur.Decision != next.Decision {
		cr.Status.Decision, cr.Status.DecidedAt = next.Decision, next.DecidedAt
		if err := rememberDenial(ctx, r.Client, r.Cooldown, &cr); err != nil {
			return ctrl.Result{}, err
		}
		phaseTransitions.WithLabelValues("ConsentRequest", string(next.Decision)).Inc()
		r.Recorder.Eventf(&cr, nil, corev1.EventTypeNormal, "Consent"+string(next.Decision), "Decide", "Consent request is %s", next.Decision)
	}
	return result, nil
}

// collect deletes a request whose command object is gone (deleted, or its name reused by
// another object) unless a durable grant still needs it: a remembered grant outlives the
// command that prompted it, so its request lives as long as that grant is in force.
func (r *ConsentRequestReconciler) collect(ctx context.Context, cr *wbv1.ConsentRequest) (bool, ctrl.Result, error) {
	var cmd client.Object = &wbv1.TerminalCommand{}
	if cr.Spec.Descriptor.Capability == wbv1.CapabilityActionRun {
		cmd = &wbv1.ActionRun{}
	}
	err := r.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: string(cr.Spec.Descriptor.CommandRef)}, cmd)
	switch {
	case err == nil && cmd.GetUID() == cr.Spec.Descriptor.CommandUID && cmd.GetDeletionTimestamp() == nil:
		return false, ctrl.Result{}, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, ctrl.Result{}, fmt.Errorf("reading command of %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	var grants wbv1.ConsentGrantList
	if err := r.List(ctx, &grants, client.InNamespace(cr.Namespace), client.MatchingFields{indexGrantRequest: cr.Name}); err != nil {
		return false, ctrl.Result{}, fmt.Errorf("listing grants of %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	now := r.Now()
	var until time.Time
	for i := range grants.Items {
		g := &grants.Items[i]
		durable := g.Spec.Scope == wbv1.ConsentRememberExactArgv || g.Spec.Scope == wbv1.ConsentRememberArgvPrefix
		if !durable || !answers(g, cr) || (g.Spec.Revoked != nil && *g.Spec.Revoked) {
			continue
		}
		if exp := grantExpiry(g); now.Before(exp) && exp.After(until) {
			until = exp
		}
	}
	if !until.IsZero() {
		return false, ctrl.Result{RequeueAfter: requeueAt(now, until)}, nil
	}
	log.FromContext(ctx).Info("Deleting consent request: its command is gone and no durable grant needs it", "request", client.ObjectKeyFromObject(cr))
	if err := r.Delete(ctx, cr, client.Preconditions{UID: &cr.UID}); client.IgnoreNotFound(err) != nil {
		return false, ctrl.Result{}, fmt.Errorf("deleting ConsentRequest %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	return true, ctrl.Result{}, nil
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
		Watches(&wbv1.TerminalCommand{}, requestOfDeleted(func(o client.Object) string { return o.(*wbv1.TerminalCommand).Status.ConsentRequestRef }), deletesOnly).
		Watches(&wbv1.ActionRun{}, requestOfDeleted(func(o client.Object) string { return o.(*wbv1.ActionRun).Status.ConsentRequestRef }), deletesOnly).
		Named("consentrequest").
		Complete(r)
}

// deletesOnly passes only delete events: a request is collected once what asked it is gone.
var deletesOnly = builder.WithPredicates(predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false }, UpdateFunc: func(event.UpdateEvent) bool { return false },
	DeleteFunc: func(event.DeleteEvent) bool { return true }, GenericFunc: func(event.GenericEvent) bool { return false },
})

// requestOfDeleted maps a deleted command or run to the consent request it names (ref; none
// when it asked none).
func requestOfDeleted(ref func(client.Object) string) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name := ref(o)
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
	})
}

package controllers

import (
	"context"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// BindingRecheckInterval is how often an active grant's operator is re-checked for the right
// to approve (SubjectAccessReview); RBAC changes are not watched.
const BindingRecheckInterval = 5 * time.Minute

// ConsentGrantReconciler decides whether a grant is effective: not denied, not revoked, not
// expired, not consumed (allow-once), and its operator still allowed to approve.
type ConsentGrantReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Now      func() time.Time
	// Recheck overrides BindingRecheckInterval.
	Recheck time.Duration
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=consentgrants,verbs=get;list;watch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=consentgrants/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

func consentGrantOwned(s *wbv1.ConsentGrantStatus) wbv1.ConsentGrantStatus {
	return wbv1.ConsentGrantStatus{
		DeltaDigest: s.DeltaDigest, ApprovalRef: s.ApprovalRef, Operator: s.Operator, State: s.State,
		Diagnostics: s.Diagnostics, ObservedGeneration: s.ObservedGeneration,
		Conditions: ownedConditions(s.Conditions, wbv1.ConditionActive, wbv1.ConditionReconciling, wbv1.ConditionStalled),
	}
}

// Reconcile implements reconcile.Reconciler.
func (r *ConsentGrantReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var g wbv1.ConsentGrant
	if err := r.Get(ctx, req.NamespacedName, &g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cur := consentGrantOwned(&g.Status)
	next := consentGrantOwned(&g.Status)
	all := append([]metav1.Condition(nil), g.Status.Conditions...)
	now := r.Now()
	next.Operator = g.Spec.Operator
	next.ObservedGeneration = g.Generation
	next.Diagnostics = nil
	result := ctrl.Result{RequeueAfter: BindingRecheckInterval}
	if r.Recheck > 0 {
		result.RequeueAfter = r.Recheck
	}

	state, msg := wbv1.ConsentGrantActive, "the grant admits its argv shape"
	diag := func(st wbv1.ConsentGrantState, code actuation.Code, m string) {
		state, msg = st, m
		next.Diagnostics = append(next.Diagnostics, wbv1.Diagnostic{Code: string(code), Ref: g.Name, Message: m})
	}
	cr, err := getRequest(ctx, r.Client, g.Namespace, string(g.Spec.RequestRef))
	switch {
	case apierrors.IsNotFound(err):
		diag(wbv1.ConsentGrantUnbound, actuation.CodeConsentScopeInvalid, "the consent request no longer exists")
	case err != nil:
		return ctrl.Result{}, err
	case !answers(&g, cr):
		diag(wbv1.ConsentGrantUnbound, actuation.CodeConsentScopeInvalid, "the consent request this grant answered no longer exists (the name now belongs to another request)")
	default:
		next.DeltaDigest, next.ApprovalRef = "", ""
		d, ref := grantApproval(&g, cr)
		next.DeltaDigest, next.ApprovalRef = wbv1.Digest(d), ref
	}
	switch expiry := grantExpiry(&g); {
	case g.Spec.Scope == wbv1.ConsentDeny:
		state, msg = wbv1.ConsentGrantDenied, "a deny decision admits nothing"
	case g.Spec.Revoked != nil && *g.Spec.Revoked:
		diag(wbv1.ConsentGrantRevoked, actuation.CodeConsentRevoked, "the grant was revoked")
	case !now.Before(expiry):
		diag(wbv1.ConsentGrantExpired, actuation.CodeConsentExpired, "the grant expired at "+expiry.UTC().Format(time.RFC3339))
	case state != wbv1.ConsentGrantActive:
		// the request is gone or is another object: diagnosed above
	case g.Status.ConsumedBy != "" || g.Status.ConsumedByUID != "":
		state, msg = wbv1.ConsentGrantConsumed, "the allow-once grant admitted "+g.Status.ConsumedBy+" (uid "+string(g.Status.ConsumedByUID)+")"
	default:
		if d := expiry.Sub(now); d < result.RequeueAfter {
			result.RequeueAfter = requeueAt(now, expiry)
		}
		ok, err := r.operatorMayApprove(ctx, &g)
		if err != nil {
			return ctrl.Result{}, err
		}
		if ref, err := durableNotGrantable(ctx, r.Client, &g, cr); err != nil {
			return ctrl.Result{}, err
		} else if ref != nil {
			diag(wbv1.ConsentGrantUnbound, ref.Code, ref.Message)
		} else if !ok {
			diag(wbv1.ConsentGrantUnbound, actuation.CodeConsentOperatorBindingInactive, fmt.Sprintf("operator %q may no longer approve consent requests in %q", g.Spec.Operator, g.Namespace))
		}
	}
	next.State = state
	active, reason := state == wbv1.ConsentGrantActive, string(state)
	setCondition(&next.Conditions, &all, cond(wbv1.ConditionActive, active, reason, msg, g.Generation))
	asKept := state == wbv1.ConsentGrantDenied || state == wbv1.ConsentGrantRevoked || state == wbv1.ConsentGrantConsumed
	for _, hc := range wbv1.HealthConditions(wbv1.ConsentGrantHealth(active, asKept), reason, msg, g.Generation) {
		setCondition(&next.Conditions, &all, hc)
	}
	wrote, err := applyStatus(ctx, r.Client, "consentgrant", &g, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote && cur.State != next.State {
		r.Recorder.Eventf(&g, nil, corev1.EventTypeNormal, "Grant"+reason, "Decide", "%s", msg)
	}
	return result, nil
}

func (r *ConsentGrantReconciler) operatorMayApprove(ctx context.Context, g *wbv1.ConsentGrant) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: g.Spec.Operator, Groups: g.Spec.OperatorGroups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: g.Namespace, Verb: "approve", Group: wbv1.GroupVersion.Group, Resource: "consentrequests",
		},
	}}
	if err := r.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("checking operator %q of grant %s/%s: %w", g.Spec.Operator, g.Namespace, g.Name, err)
	}
	return sar.Status.Allowed, nil
}

// SetupWithManager registers the controller.
func (r *ConsentGrantReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&wbv1.ConsentGrant{}).
		Watches(&wbv1.WorkbenchPolicy{}, handler.EnqueueRequestsFromMapFunc(r.allGrants)). // consent.durableGrants
		Named("consentgrant").Complete(r)
}

// allGrants wakes every grant when the WorkbenchPolicy changes: its consent block decides
// whether remembered grants stay grantable.
func (r *ConsentGrantReconciler) allGrants(ctx context.Context, _ client.Object) []reconcile.Request {
	var grants wbv1.ConsentGrantList
	if err := r.List(ctx, &grants); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(grants.Items))
	for i := range grants.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&grants.Items[i])})
	}
	return out
}

package controllers

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// Bounds of the effective projection.
const (
	maxProjectedEntries     = 256
	maxProjectedDiagnostics = 64
)

// CommandProfileReconciler projects the effective profile into status: the spec plus the
// argv shapes of active consent grants, each with its provenance, and diagnostics for grants
// left out (expired, revoked, operator no longer allowed). The profile's safety caps are
// never part of a grant, so a grant cannot loosen them.
type CommandProfileReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=commandprofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=commandprofiles/status,verbs=get;update;patch

func commandProfileOwned(s *wbv1.CommandProfileStatus) wbv1.CommandProfileStatus {
	return wbv1.CommandProfileStatus{
		EffectiveDigest: s.EffectiveDigest, ConsentEntries: s.ConsentEntries, Diagnostics: s.Diagnostics,
		ObservedGeneration: s.ObservedGeneration, Conditions: ownedConditions(s.Conditions, wbv1.ConditionValid, wbv1.ConditionReconciling, wbv1.ConditionStalled),
	}
}

// Reconcile implements reconcile.Reconciler.
func (r *CommandProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var prof wbv1.CommandProfile
	if err := r.Get(ctx, req.NamespacedName, &prof); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cur := commandProfileOwned(&prof.Status)
	next := commandProfileOwned(&prof.Status)
	all := append([]metav1.Condition(nil), prof.Status.Conditions...)
	next.ObservedGeneration = prof.Generation
	next.ConsentEntries, next.Diagnostics = nil, nil

	core := convert.Profile(&prof.Spec)
	if refusals := actuation.ValidateProfile(core); len(refusals) > 0 {
		setCondition(&next.Conditions, &all, cond(wbv1.ConditionValid, false, "Invalid", refusals[0].Error(), prof.Generation))
		gitopsHealth(&next.Conditions, &all, wbv1.HealthStalled, "Invalid", refusals[0].Error(), prof.Generation)
	} else {
		setCondition(&next.Conditions, &all, cond(wbv1.ConditionValid, true, "Valid", "the profile satisfies the actuation core", prof.Generation))
		gitopsHealth(&next.Conditions, &all, wbv1.HealthCurrent, "Valid", "the profile satisfies the actuation core", prof.Generation)
	}

	var grants wbv1.ConsentGrantList
	if err := r.List(ctx, &grants, client.InNamespace(prof.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing grants for %s: %w", req, err)
	}
	slices.SortFunc(grants.Items, func(a, b wbv1.ConsentGrant) int { return compareStrings(a.Name, b.Name) })
	for i := range grants.Items {
		g := &grants.Items[i]
		if g.Spec.Scope == wbv1.ConsentDeny {
			continue
		}
		cr, err := getRequest(ctx, r.Client, g.Namespace, string(g.Spec.RequestRef))
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return ctrl.Result{}, err
		}
		if cr.Spec.Descriptor.Capability != wbv1.CapabilityTerminalCommand || cr.Spec.Descriptor.ProfileRef != wbv1.ObjectName(prof.Name) || !answers(g, cr) {
			continue
		}
		if g.Status.State != wbv1.ConsentGrantActive && !consumedBinding(g, cr) {
			for _, d := range g.Status.Diagnostics {
				if len(next.Diagnostics) < maxProjectedDiagnostics {
					next.Diagnostics = append(next.Diagnostics, d)
				}
			}
			continue
		}
		e := convert.Entry(g.Namespace, g, &cr.Spec.Descriptor)
		if ref := actuation.ValidateConsentEntry(core, e); ref != nil {
			if len(next.Diagnostics) < maxProjectedDiagnostics {
				next.Diagnostics = append(next.Diagnostics, wbv1.Diagnostic{Code: string(ref.Code), Ref: g.Name, Message: truncate(ref.Message, 1024)})
			}
			continue
		}
		if len(next.ConsentEntries) >= maxProjectedEntries {
			log.FromContext(ctx).Info("Projection is full; leaving a grant out", "grant", g.Name, "cap", maxProjectedEntries)
			continue
		}
		exp := metav1.NewTime(grantExpiry(g))
		entry := wbv1.ConsentEntry{
			GrantRef: wbv1.ObjectName(g.Name), Scope: g.Spec.Scope, Argv: e.Argv, Prefix: e.Prefix, VariablePrefixes: e.VariablePrefixes,
			Cwd: cr.Spec.Descriptor.Cwd, DeltaDigest: g.Status.DeltaDigest, Operator: g.Spec.Operator, ExpiresAt: &exp,
			EnvironmentRef: cr.Spec.Descriptor.EnvironmentRef, EnvironmentUID: string(cr.Spec.Descriptor.EnvironmentUID),
			OperationalContext: cr.Spec.Descriptor.OperationalContext,
		}
		if g.Spec.Scope == wbv1.ConsentAllowOnce {
			entry.CommandRef = cr.Spec.Descriptor.CommandRef
			entry.CommandUID, entry.ArgvDigest = string(cr.Spec.Descriptor.CommandUID), cr.Spec.Descriptor.ArgvDigest
		}
		next.ConsentEntries = append(next.ConsentEntries, entry)
	}
	digest, err := actuation.Digest(struct {
		Profile string              `json:"profile"`
		Entries []wbv1.ConsentEntry `json:"entries"`
	}{actuation.ProfileDigest(core), next.ConsentEntries})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("digesting effective profile %s: %w", req, err)
	}
	next.EffectiveDigest = wbv1.Digest(digest)
	_, err = applyStatus(ctx, r.Client, "commandprofile", &prof, cur, next)
	return ctrl.Result{}, err
}

// SetupWithManager registers the controller; a grant wakes the profile of its request.
func (r *CommandProfileReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&wbv1.CommandProfile{}).
		Watches(&wbv1.ConsentGrant{}, handler.EnqueueRequestsFromMapFunc(r.profileOfGrant)).
		Named("commandprofile").
		Complete(r)
}

func (r *CommandProfileReconciler) profileOfGrant(ctx context.Context, o client.Object) []reconcile.Request {
	g := o.(*wbv1.ConsentGrant)
	cr, err := getRequest(ctx, r.Client, g.Namespace, string(g.Spec.RequestRef))
	if err != nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: g.Namespace, Name: string(cr.Spec.Descriptor.ProfileRef)}}}
}

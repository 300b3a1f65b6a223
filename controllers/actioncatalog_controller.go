package controllers

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// Condition reasons of catalogs and runs.
const (
	ReasonSigned            = "Signed"
	ReasonUnsigned          = "Unsigned"
	ReasonBootstrap         = "Bootstrap"
	ReasonInvalid           = "Invalid"
	ReasonAdmittedByCatalog = "AdmittedByCatalog"
	ReasonWaitingForCatalog = "WaitingForCatalog"
)

// ActionCatalogReconciler writes a catalog's verdict: structure (Valid), signature
// (Authorized), and per action authorized/available with the reason, through the core.
// Availability comes from the node agents' WorkbenchNode.status.actionClasses.
type ActionCatalogReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=actioncatalogs,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=actioncatalogs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=actionsigners;workbenchpolicies;workbenchnodes,verbs=get;list;watch

// Reconcile implements reconcile.Reconciler.
func (r *ActionCatalogReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cat wbv1.ActionCatalog
	if err := r.Get(ctx, req.NamespacedName, &cat); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	signers, pol, err := convert.ActionAuthority(ctx, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	var nodes wbv1.WorkbenchNodeList
	if err := r.List(ctx, &nodes); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing WorkbenchNodes for catalog %s: %w", req, err)
	}
	cur := cat.Status
	next := wbv1.ActionCatalogStatus{ObservedGeneration: cat.Generation}
	all := append([]metav1.Condition(nil), cat.Status.Conditions...)
	set := func(c metav1.Condition) { setCondition(&next.Conditions, &all, c) }
	core, digest, err := convert.ActionCatalog(&cat)
	if err != nil {
		return ctrl.Result{}, err
	}
	next.SpecDigest = wbv1.Digest(digest)
	if rs := actions.ValidateCatalog(core); len(rs) > 0 {
		set(cond(wbv1.ConditionValid, false, ReasonInvalid, truncate(rs[0].Error(), 1024), cat.Generation))
	} else {
		set(cond(wbv1.ConditionValid, true, "Valid", "every declaration is well-formed", cat.Generation))
	}
	v, states := actions.CatalogStates(cat.Namespace, core, digest, convert.ActionSignature(cat.Signature), convert.ActionSigners(signers), convert.ActionPolicy(pol))
	next.Authorization = wbv1.ActionAuthorization(v.State)
	switch v.State {
	case actions.StateAuthorized:
		next.Signer = v.Signer.Name
		set(cond("Authorized", true, ReasonSigned, v.Message, cat.Generation))
	case actions.StateBootstrap:
		set(cond("Authorized", false, ReasonBootstrap, v.Message, cat.Generation))
	default:
		set(cond("Authorized", false, ReasonUnsigned, string(v.Code)+": "+v.Message, cat.Generation))
	}
	for _, s := range states {
		st := wbv1.ActionStatus{ID: s.ID, Class: wbv1.ActionClass(s.Class), Authorization: wbv1.ActionAuthorization(s.Authorization), Code: string(s.Code), Message: truncate(s.Message, 1024)}
		st.Availability = classAvailability(nodes.Items, s.Class)
		if st.Availability != wbv1.ActionAvailable && st.Code == "" {
			st.Code = string(actuation.CodeActionClassUnavailable)
			st.Message = "no node publishes class " + string(s.Class) + " (" + actions.SeedName(s.Class) + ") as available"
		}
		if !s.Class.Known() {
			st.Class = ""
		}
		next.Actions = append(next.Actions, st)
	}
	catalogHealth(&next, &all, cat.Generation) // gitops_health.go
	_, err = applyStatus(ctx, r.Client, "actioncatalog", &cat, cur, next)
	return ctrl.Result{}, err
}

// enforcedClass is the class whose envelope a node must enforce for c: C7 runs under the
// read-only envelope of C1 after consent.
func enforcedClass(c actions.Class) actions.Class {
	if c == actions.ClassOperatorGated {
		return actions.ClassReadOnlySpawn
	}
	return c
}

// nodeSupports says whether one node publishes class c Available.
func nodeSupports(n *wbv1.WorkbenchNode, c actions.Class) bool {
	want := wbv1.ActionClass(enforcedClass(c))
	return slices.ContainsFunc(n.Status.ActionClasses, func(s wbv1.ActionClassSupport) bool {
		return s.Class == want && s.Availability == wbv1.ActionAvailable
	})
}

func classAvailability(nodes []wbv1.WorkbenchNode, c actions.Class) wbv1.ActionAvailability {
	published := false
	for i := range nodes {
		if nodeSupports(&nodes[i], c) {
			return wbv1.ActionAvailable
		}
		published = published || len(nodes[i].Status.ActionClasses) > 0
	}
	if !published {
		return wbv1.ActionUnknown
	}
	return wbv1.ActionUnavailable
}

// SetupWithManager registers the controller: signers, the policy and the nodes' class
// support re-decide every catalog.
func (r *ActionCatalogReconciler) SetupWithManager(mgr ctrl.Manager) error {
	allCatalogs := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var cats wbv1.ActionCatalogList
		if err := r.List(ctx, &cats); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(cats.Items))
		for i := range cats.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&cats.Items[i])})
		}
		return out
	})
	classesChanged := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*wbv1.WorkbenchNode)
			n, ok2 := e.ObjectNew.(*wbv1.WorkbenchNode)
			return !ok1 || !ok2 || !slices.Equal(o.Status.ActionClasses, n.Status.ActionClasses)
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&wbv1.ActionCatalog{}).
		Watches(&wbv1.ActionSigner{}, allCatalogs).
		Watches(&wbv1.WorkbenchPolicy{}, allCatalogs).
		Watches(&wbv1.WorkbenchNode{}, allCatalogs, builder.WithPredicates(classesChanged)).
		Named("actioncatalog").
		Complete(r)
}

package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// BindingReconciler binds sessions, waits, probes and file patches to the node of the
// environment they act on (labels workbench.sensorium.dev/node and .../environment), so the
// node agent that watches only its own node sees them. An object whose environment never
// appears is given its one final outcome here, with a refusal code.
type BindingReconciler[T client.Object] struct {
	client.Client
	Now    func() time.Time
	Kind   string
	NewObj func() T
	// NewList lists objects of the kind; an Environment change wakes the unbound ones in
	// its namespace, so binding follows placement without waiting for a recheck.
	NewList func() client.ObjectList
	// EnvOf names the environment the object acts on ("" when it acts on none, e.g. a wait
	// on another operation, which the node of that operation's object handles).
	EnvOf func(ctx context.Context, c client.Reader, obj T) (string, error)
	// Final reports an object that already has its outcome.
	Final func(obj T) bool
	// Fail writes the object's final outcome for an environment that does not exist.
	Fail func(ctx context.Context, c client.Client, obj T, code actuation.Code, msg string) error
	// Correlate, when set, names the correlation id the object inherits (its command's);
	// it is labelled with it when it carries none (correlation.go).
	Correlate func(ctx context.Context, c client.Reader, obj T) (string, error)
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=terminalsessions;waits;probes;filepatches;artifacts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=terminalsessions/status;waits/status;probes/status;filepatches/status,verbs=get;update;patch

// Reconcile implements reconcile.Reconciler.
func (r *BindingReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.NewObj()
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.Final(obj) {
		return ctrl.Result{}, nil
	}
	envName, err := r.EnvOf(ctx, r.Client, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	if envName == "" {
		return ctrl.Result{}, nil
	}
	var env wbv1.Environment
	young := r.Now().Sub(obj.GetCreationTimestamp().Time) < ReferenceGrace
	if err := r.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: envName}, &env); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading Environment %s for %s %s: %w", envName, r.Kind, req, err)
		}
		if young {
			return ctrl.Result{RequeueAfter: ReferenceGrace}, nil
		}
		refusals.WithLabelValues(r.Kind, string(actuation.CodeEnvironmentUnavailable)).Inc()
		return ctrl.Result{}, r.Fail(ctx, r.Client, obj, actuation.CodeEnvironmentUnavailable, "environment "+envName+" does not exist")
	}
	node := env.Status.NodeName
	if node == "" {
		return ctrl.Result{RequeueAfter: PlacementRecheck}, nil
	}
	labels := obj.GetLabels()
	cid, err := r.correlation(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	if labels[wbv1.NodeLabel] == node && labels[wbv1.EnvironmentLabel] == env.Name && cid == "" {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(T), client.MergeFromWithOptimisticLock{})
	if labels == nil {
		labels = map[string]string{}
	}
	labels[wbv1.NodeLabel] = node
	labels[wbv1.EnvironmentLabel] = env.Name
	if cid != "" {
		labels[wbv1.CorrelationLabel] = cid
	}
	obj.SetLabels(labels)
	err = r.Patch(ctx, obj, patch)
	if apierrors.IsConflict(err) {
		// Another writer moved it (the cleanup finalizer, the node): not an error to log, the
		// next pass reads it again.
		return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // SA1019: the rate-limited requeue RequeueAfter has no form for
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("binding %s %s to node %s: %w", r.Kind, req, node, err)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the binder under a name of its kind.
func (r *BindingReconciler[T]) SetupWithManager(mgr ctrl.Manager) error {
	// A scope may name a command, session or artifact created just before the object: this
	// manager's cache may not hold it yet when the object is first reconciled (EnvOf then
	// resolves no environment). Its creation event wakes the unbound objects of its
	// namespace, so binding never depends on a later Environment change.
	created := builder.WithPredicates(predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true }, UpdateFunc: func(event.UpdateEvent) bool { return false },
		DeleteFunc: func(event.DeleteEvent) bool { return false }, GenericFunc: func(event.GenericEvent) bool { return false },
	})
	return ctrl.NewControllerManagedBy(mgr).For(r.NewObj()).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(r.unboundIn)).
		Watches(&wbv1.TerminalCommand{}, handler.EnqueueRequestsFromMapFunc(r.unboundIn), created).
		Watches(&wbv1.TerminalSession{}, handler.EnqueueRequestsFromMapFunc(r.unboundIn), created).
		Watches(&wbv1.Artifact{}, handler.EnqueueRequestsFromMapFunc(r.unboundIn), created).
		Named(strings.ToLower(r.Kind) + "-binding").Complete(r)
}

// unboundIn maps an Environment change to the objects of its namespace not yet bound.
func (r *BindingReconciler[T]) unboundIn(ctx context.Context, env client.Object) []reconcile.Request {
	list := r.NewList()
	if err := r.List(ctx, list, client.InNamespace(env.GetNamespace())); err != nil {
		return nil
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, it := range items {
		o, ok := it.(client.Object)
		if ok && o.GetLabels()[wbv1.NodeLabel] == "" {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
	}
	return out
}

// envOfScope resolves the environment a Wait or Probe scope observes.
func envOfScope(ctx context.Context, c client.Reader, ns string, s *wbv1.Scope) (string, error) {
	switch {
	case s == nil:
		return "", nil
	case s.EnvironmentRef != nil:
		return string(*s.EnvironmentRef), nil
	case s.File != nil:
		return string(s.File.EnvironmentRef), nil
	case s.SessionRef != nil:
		return envOfSession(ctx, c, ns, string(*s.SessionRef))
	case s.CommandRef != nil:
		var cmd wbv1.TerminalCommand
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: string(*s.CommandRef)}, &cmd); err != nil {
			return "", ignoreMissing(err, "TerminalCommand", string(*s.CommandRef))
		}
		return envOfSession(ctx, c, ns, string(cmd.Spec.SessionRef))
	case s.ArtifactRef != nil:
		var a wbv1.Artifact
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: string(*s.ArtifactRef)}, &a); err != nil {
			return "", ignoreMissing(err, "Artifact", string(*s.ArtifactRef))
		}
		return string(a.Spec.EnvironmentRef), nil
	}
	return "", nil
}

func envOfSession(ctx context.Context, c client.Reader, ns, name string) (string, error) {
	var sess wbv1.TerminalSession
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &sess); err != nil {
		return "", ignoreMissing(err, "TerminalSession", name)
	}
	return string(sess.Spec.EnvironmentRef), nil
}

// ignoreMissing treats a missing intermediate object as "no environment yet".
func ignoreMissing(err error, kind, name string) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("reading %s %s: %w", kind, name, err)
}

// Package terminalviews is the node agent's room for TerminalViews and ViewGrants: it
// publishes their status, evaluates a view for the data plane's view streams, and wakes
// those streams when a view, grant, environment or session of this node changes.
package terminalviews

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/dataplane"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/statusapply"
	"sensorium.dev/workbench/internal/views"
)

// MaxViewSubscribers caps concurrent view-stream subscriptions to watch changes (each
// stream holds one; the data plane's stream slots bound them first).
const MaxViewSubscribers = 4096

// Hub wakes every view stream after a change of a TerminalView, ViewGrant or
// Environment of this node, as the watch delivers it: a revocation reaches the streams
// without any polling. The zero Hub is ready to use.
type Hub struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

func (h *Hub) poke() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Subscribe returns a channel poked after each change, and its cancel.
func (h *Hub) Subscribe() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[chan struct{}]struct{}{}
	}
	if len(h.subs) < MaxViewSubscribers {
		h.subs[c] = struct{}{}
	}
	h.mu.Unlock()
	return c, func() {
		h.mu.Lock()
		delete(h.subs, c)
		h.mu.Unlock()
	}
}

// Deps is what the room needs: the API client and reader, the hub it pokes, and the PTY
// program of a session open on this node (nil when none).
type Deps struct {
	Client   client.Client
	Reader   client.Reader
	Hub      *Hub
	Terminal func(sessionUID string) *session.Session
}

// Room evaluates views and publishes their status.
type Room struct{ d Deps }

// New returns the room over d.
func New(d Deps) *Room { return &Room{d: d} }

// watchViews registers the hub on the informers of the kinds a view depends on.
func (a *Room) watchViews(ctx context.Context, c cache.Cache) error {
	for _, obj := range []client.Object{&wbv1.ViewGrant{}, &wbv1.TerminalView{}, &wbv1.Environment{}, &wbv1.TerminalSession{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watching %T for views: %w", obj, err)
		}
		poke := func(any) { a.d.Hub.poke() }
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: poke, DeleteFunc: poke, UpdateFunc: func(_, n any) { poke(n) },
		}); err != nil {
			return fmt.Errorf("watching %T for views: %w", obj, err)
		}
	}
	return nil
}

// freshGrantsTimeout bounds a stream open's read of its grants from the API server.
const freshGrantsTimeout = 10 * time.Second

// Grants serves dataplane.ViewResolver: the view's grants from the node's watch cache,
// or from the API server when fresh (a stream's open).
func (r *Room) Grants(ns, view string, fresh bool) ([]views.Grant, error) {
	var list wbv1.ViewGrantList
	var from client.Reader = r.d.Client
	ctx, cancel := context.WithTimeout(context.Background(), freshGrantsTimeout)
	defer cancel()
	if fresh {
		from = r.d.Reader
	}
	if err := from.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing ViewGrants in %s: %w", ns, err)
	}
	var out []views.Grant
	for i := range list.Items {
		g := &list.Items[i]
		if string(g.Spec.ViewRef) == view {
			out = append(out, grantOf(g))
		}
	}
	return out, nil
}

func grantOf(g *wbv1.ViewGrant) views.Grant {
	s := g.Spec.Subject
	return views.Grant{Name: g.Name, ViewUID: string(g.Spec.ViewUID), ExpiresAt: g.Spec.ExpiresAt.Time,
		Revoked: g.Spec.Revoked != nil && *g.Spec.Revoked,
		Subject: views.Subject{Kind: string(s.Kind), Name: s.Name, Namespace: s.Namespace}}
}

// View serves dataplane.ViewResolver.
func (r *Room) View(ns, name string) (dataplane.ViewInfo, error) {
	ctx := context.Background()
	var v wbv1.TerminalView
	if err := r.d.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &v); err != nil {
		if apierrors.IsNotFound(err) {
			return dataplane.ViewInfo{}, fmt.Errorf("terminal view %s/%s is not bound to this node: %w", ns, name, dataplane.ErrNotFound)
		}
		return dataplane.ViewInfo{}, err
	}
	info, _, err := r.viewInfo(ctx, &v)
	return info, err
}

// viewInfo evaluates a view now: its binding against the environment, its session on this
// node. The second result is the live binding of the environment.
func (a *Room) viewInfo(ctx context.Context, v *wbv1.TerminalView) (dataplane.ViewInfo, views.Binding, error) {
	spec := &v.Spec
	info := dataplane.ViewInfo{UID: string(v.UID), Freshness: 10 * time.Second, MinInterval: 100 * time.Millisecond, MaxBytes: 16384}
	if spec.FreshnessSeconds != nil {
		info.Freshness = time.Duration(*spec.FreshnessSeconds) * time.Second
	}
	if spec.MinFrameIntervalMillis != nil {
		info.MinInterval = time.Duration(*spec.MinFrameIntervalMillis) * time.Millisecond
	}
	if spec.MaxFrameBytes != nil {
		info.MaxBytes = int(*spec.MaxFrameBytes)
	}
	b := spec.Binding
	if b == nil {
		info.Refusal, info.Message = actuation.CodeViewContextMissing, "the view carries no environment binding"
		return info, views.Binding{}, nil
	}
	info.Context, info.Generation = string(b.OperationalContext), b.SourceGeneration
	bound := views.Binding{EnvironmentUID: string(b.EnvironmentUID), SourceGeneration: b.SourceGeneration, Context: actuation.ContextClass(b.OperationalContext)}
	var env wbv1.Environment
	var now views.Binding
	switch err := a.d.Client.Get(ctx, types.NamespacedName{Namespace: v.Namespace, Name: string(b.EnvironmentRef)}, &env); {
	case err == nil:
		declared := actuation.ContextClass("")
		if oc := env.Spec.OperationalContext; oc != nil {
			declared = actuation.ContextClass(oc.Class)
		}
		now = views.Binding{EnvironmentUID: string(env.UID), SourceGeneration: env.Status.SourceGeneration,
			Context: views.CurrentContext(actuation.ContextClass(env.Status.EffectiveOperationalContext), declared)}
	case !apierrors.IsNotFound(err):
		return info, now, err
	}
	if c := views.CheckBinding(bound, now, actuation.ContextClass(spec.ClassificationCeiling)); c != "" {
		info.Refusal = c
		info.Message = fmt.Sprintf("the view is bound to environment %s generation %d context %s; it is now uid %s generation %d context %q: grant again on a new view",
			b.EnvironmentRef, b.SourceGeneration, b.OperationalContext, now.EnvironmentUID, now.SourceGeneration, now.Context)
		return info, now, nil
	}
	var ts wbv1.TerminalSession
	if err := a.d.Client.Get(ctx, types.NamespacedName{Namespace: v.Namespace, Name: string(spec.SessionRef)}, &ts); err != nil {
		if !apierrors.IsNotFound(err) {
			return info, now, err
		}
	}
	var pty *session.Session
	if ts.UID != "" {
		pty = a.d.Terminal(string(ts.UID))
	}
	if pty == nil {
		info.Refusal = actuation.CodeViewSessionUnavailable
		info.Message = fmt.Sprintf("session %s/%s runs no PTY program open on this node", v.Namespace, spec.SessionRef)
		return info, now, nil
	}
	info.SessionUID, info.Terminal = string(ts.UID), pty
	return info, now, nil
}

// viewReconciler publishes a TerminalView's status: phase, bound generation and context,
// and the code observers are refused with.
type viewReconciler struct{ a *Room }

func (r *viewReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var v wbv1.TerminalView
	if err := r.a.d.Client.Get(ctx, req.NamespacedName, &v); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	info, _, err := r.a.viewInfo(ctx, &v)
	if err != nil {
		return ctrl.Result{}, err
	}
	cur := v.Status
	next := wbv1.TerminalViewStatus{Phase: wbv1.ViewPublishing, ObservedGeneration: v.Generation,
		EnvironmentGeneration: info.Generation, OperationalContext: wbv1.ContextClass(info.Context),
		Conditions: statusapply.Owned(cur.Conditions, wbv1.ConditionPublishing, wbv1.ConditionReconciling, wbv1.ConditionStalled)}
	cond := statusapply.Cond(wbv1.ConditionPublishing, true, "Publishing", "publishing the visible screen of session "+string(v.Spec.SessionRef), v.Generation)
	if info.Refusal != "" {
		switch info.Refusal {
		case actuation.CodeViewContextSuperseded:
			next.Phase = wbv1.ViewSuperseded
		case actuation.CodeViewSessionUnavailable:
			next.Phase = wbv1.ViewUnavailable
		default:
			next.Phase = wbv1.ViewRefused
		}
		next.Refusal = &wbv1.Refusal{Code: string(info.Refusal), Message: statusapply.Truncate(info.Message, 1024)}
		cond = statusapply.Cond(wbv1.ConditionPublishing, false, string(next.Phase), statusapply.Truncate(info.Message, 1024), v.Generation)
	}
	statusapply.Set(&next.Conditions, &next.Conditions, cond)
	for _, hc := range wbv1.HealthConditions(wbv1.ViewHealth(next.Phase), string(next.Phase), cond.Message, v.Generation) {
		statusapply.Set(&next.Conditions, &next.Conditions, hc)
	}
	_, err = statusapply.Apply(ctx, r.a.d.Client, nodekit.FieldManager+"terminalview", &v, viewStatusProjection(&cur), &next)
	return ctrl.Result{}, err
}

func viewStatusProjection(s *wbv1.TerminalViewStatus) *wbv1.TerminalViewStatus {
	p := s.DeepCopy()
	p.Conditions = statusapply.Owned(s.Conditions, wbv1.ConditionPublishing, wbv1.ConditionReconciling, wbv1.ConditionStalled)
	return p
}

// viewGrantReconciler publishes whether a ViewGrant admits its subject now, and wakes at
// its expiry.
type viewGrantReconciler struct{ a *Room }

// ConditionActive is true while a ViewGrant admits its subject.
const ConditionActive = "Active"

func (r *viewGrantReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var g wbv1.ViewGrant
	if err := r.a.d.Client.Get(ctx, req.NamespacedName, &g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := time.Now()
	reason := grantOf(&g).State(now)
	var v wbv1.TerminalView
	if reason == "" {
		switch err := r.a.d.Client.Get(ctx, types.NamespacedName{Namespace: g.Namespace, Name: string(g.Spec.ViewRef)}, &v); {
		case apierrors.IsNotFound(err):
			reason = actuation.CodeViewGrantMissing
		case err != nil:
			return ctrl.Result{}, err
		case v.UID != g.Spec.ViewUID:
			reason = actuation.CodeViewGrantMissing
		default:
			info, _, err := r.a.viewInfo(ctx, &v)
			if err != nil {
				return ctrl.Result{}, err
			}
			if info.Refusal != "" && info.Refusal != actuation.CodeViewSessionUnavailable {
				reason = info.Refusal
			}
		}
	}
	state := wbv1.ViewGrantActive
	if reason != "" {
		state = wbv1.ViewGrantInactive
	}
	cur := wbv1.ViewGrantStatus{State: g.Status.State, Reason: g.Status.Reason, ObservedGeneration: g.Status.ObservedGeneration,
		Conditions: statusapply.Owned(g.Status.Conditions, ConditionActive, wbv1.ConditionReconciling, wbv1.ConditionStalled)}
	next := wbv1.ViewGrantStatus{State: state, Reason: string(reason), ObservedGeneration: g.Generation, Conditions: cur.Conditions}
	msg := "admits " + string(g.Spec.Subject.Kind) + " " + g.Spec.Subject.Name + " to view " + string(g.Spec.ViewRef)
	condReason := "Active"
	if reason != "" {
		msg, condReason = string(reason), "Inactive"
	}
	next.Conditions = slices.Clone(next.Conditions)
	statusapply.Set(&next.Conditions, &next.Conditions, statusapply.Cond(ConditionActive, reason == "", condReason, msg, g.Generation))
	// The rule of a ConsentGrant: active, or revoked as its spec asked, is current; a grant
	// that stopped admitting otherwise (expired, its view gone or superseded) is stalled.
	for _, hc := range wbv1.HealthConditions(wbv1.ConsentGrantHealth(reason == "", reason == actuation.CodeViewGrantRevoked), condReason, msg, g.Generation) {
		statusapply.Set(&next.Conditions, &next.Conditions, hc)
	}
	if _, err := statusapply.Apply(ctx, r.a.d.Client, nodekit.FieldManager+"viewgrant", &g, &cur, &next); err != nil {
		return ctrl.Result{}, err
	}
	if reason == "" {
		return ctrl.Result{RequeueAfter: statusapply.RequeueAt(now, g.Spec.ExpiresAt.Time)}, nil
	}
	return ctrl.Result{}, nil
}

// Setup registers the view and grant status reconcilers; a change of an environment
// or session re-evaluates the views (and their grants) of its namespace.
func (a *Room) Setup(ctx context.Context, mgr ctrl.Manager) error {
	viewsIn := func(ctx context.Context, o client.Object) []reconcile.Request {
		var l wbv1.TerminalViewList
		if err := a.d.Client.List(ctx, &l, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		return nodekit.RequestsOf(l.Items, nil)
	}
	grantsIn := func(ctx context.Context, o client.Object) []reconcile.Request {
		var l wbv1.ViewGrantList
		if err := a.d.Client.List(ctx, &l, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		return nodekit.RequestsOf(l.Items, nil)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.TerminalView{}).Named("node-terminalview").
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(viewsIn)).
		Watches(&wbv1.TerminalSession{}, handler.EnqueueRequestsFromMapFunc(viewsIn)).
		Complete(&viewReconciler{a: a}); err != nil {
		return fmt.Errorf("terminal view controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.ViewGrant{}).Named("node-viewgrant").
		Watches(&wbv1.TerminalView{}, handler.EnqueueRequestsFromMapFunc(grantsIn)).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(grantsIn)).
		Complete(&viewGrantReconciler{a: a}); err != nil {
		return fmt.Errorf("view grant controller: %w", err)
	}
	return a.watchViews(ctx, mgr.GetCache())
}

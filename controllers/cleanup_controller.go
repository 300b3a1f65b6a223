package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// DefaultNodeLostAfter is how long a node's heartbeat may be silent before the manager
// stops waiting for that node to clean up a deleted object and releases its finalizer.
const DefaultNodeLostAfter = 10 * time.Minute

// CleanupReconciler owns the cleanup finalizer of one kind whose objects a node may hold
// something for (Environment, TerminalSession, TerminalCommand, Artifact).
//
// The manager adds the finalizer before a node can act and removes it once the node
// reports, in its own status conditions, that it holds nothing more for the object (the
// Released predicate in api/v1alpha1). The node agent therefore never writes metadata: a
// node identity stays restricted to status.
//
// The escape: a finalizer must never wedge deletion forever when no node agent will ever
// come back. When the object's node has no WorkbenchNode, or its heartbeat is older than
// NodeLostAfter, the manager releases the finalizer without the node's report; whatever the
// node still holds is then removed by that node's start-up inventory sweep if it ever
// returns (it compares what it holds with what the API server still wants).
type CleanupReconciler[T client.Object] struct {
	client.Client
	Now           func() time.Time
	NodeLostAfter time.Duration
	Kind          string
	NewObj        func() T
	// NodeOf names the node that may hold something for the object ("" when none ever did).
	NodeOf func(T) string
	// Released reports that the node holds nothing more for the object.
	Released func(T) bool
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=environments;terminalsessions;terminalcommands;artifacts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=workbenchnodes,verbs=get;list;watch

// Reconcile implements reconcile.Reconciler.
func (r *CleanupReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.NewObj()
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	has := controllerutil.ContainsFinalizer(obj, wbv1.CleanupFinalizer)
	if obj.GetDeletionTimestamp().IsZero() {
		if has || r.Released(obj) && r.NodeOf(obj) != "" {
			return ctrl.Result{}, nil
		}
		err := r.patchFinalizer(ctx, obj, true)
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // SA1019: the rate-limited requeue RequeueAfter has no form for; another writer moved it (binding); the next pass reads it again
		}
		return ctrl.Result{}, err
	}
	if !has {
		return ctrl.Result{}, nil
	}
	node := r.NodeOf(obj)
	if node == "" || r.Released(obj) {
		return ctrl.Result{}, r.patchFinalizer(ctx, obj, false)
	}
	lost, wait, err := r.nodeLost(ctx, node)
	if err != nil {
		return ctrl.Result{}, err
	}
	if lost != "" {
		log.FromContext(ctx).Info("Releasing cleanup finalizer without the node's report", "kind", r.Kind, "object", req, "node", node, "reason", lost)
		return ctrl.Result{}, r.patchFinalizer(ctx, obj, false)
	}
	// The node's status report wakes this reconciler; the requeue is the node-lost bound.
	return ctrl.Result{RequeueAfter: wait}, nil
}

// nodeLost says why the node counts as lost ("" when it does not) and otherwise how long
// until it would.
func (r *CleanupReconciler[T]) nodeLost(ctx context.Context, node string) (string, time.Duration, error) {
	var wn wbv1.WorkbenchNode
	if err := r.Get(ctx, types.NamespacedName{Name: node}, &wn); err != nil {
		if apierrors.IsNotFound(err) {
			return "WorkbenchNode " + node + " does not exist", 0, nil
		}
		return "", 0, fmt.Errorf("reading WorkbenchNode %s: %w", node, err)
	}
	bound := r.NodeLostAfter
	if bound <= 0 {
		bound = DefaultNodeLostAfter
	}
	last := wn.CreationTimestamp.Time
	if hb := wn.Status.HeartbeatTime; hb != nil {
		last = hb.Time
	}
	silent := r.Now().Sub(last)
	if silent >= bound {
		return fmt.Sprintf("node %s has not sent a heartbeat for %s (bound %s)", node, silent.Round(time.Second), bound), 0, nil
	}
	return "", bound - silent, nil
}

func (r *CleanupReconciler[T]) patchFinalizer(ctx context.Context, obj T, add bool) error {
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(T), client.MergeFromWithOptimisticLock{})
	verb := "removing"
	if add {
		verb = "adding"
		controllerutil.AddFinalizer(obj, wbv1.CleanupFinalizer)
	} else {
		controllerutil.RemoveFinalizer(obj, wbv1.CleanupFinalizer)
	}
	if err := r.Patch(ctx, obj, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s cleanup finalizer of %s %s: %w", verb, r.Kind, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// SetupWithManager registers the reconciler under a name of its kind.
func (r *CleanupReconciler[T]) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(r.NewObj()).
		Named(strings.ToLower(r.Kind) + "-cleanup").Complete(r)
}

func cleanupReconcilers(c client.Client, now func() time.Time, lostAfter time.Duration) []interface{ SetupWithManager(ctrl.Manager) error } {
	return []interface{ SetupWithManager(ctrl.Manager) error }{
		&CleanupReconciler[*wbv1.Environment]{Client: c, Now: now, NodeLostAfter: lostAfter, Kind: "Environment",
			NewObj:   func() *wbv1.Environment { return &wbv1.Environment{} },
			NodeOf:   func(o *wbv1.Environment) string { return o.Status.NodeName },
			Released: wbv1.EnvironmentReleased},
		&CleanupReconciler[*wbv1.TerminalSession]{Client: c, Now: now, NodeLostAfter: lostAfter, Kind: "TerminalSession",
			NewObj:   func() *wbv1.TerminalSession { return &wbv1.TerminalSession{} },
			NodeOf:   func(o *wbv1.TerminalSession) string { return o.Labels[wbv1.NodeLabel] },
			Released: wbv1.SessionReleased},
		&CleanupReconciler[*wbv1.TerminalCommand]{Client: c, Now: now, NodeLostAfter: lostAfter, Kind: "TerminalCommand",
			NewObj:   func() *wbv1.TerminalCommand { return &wbv1.TerminalCommand{} },
			NodeOf:   func(o *wbv1.TerminalCommand) string { return o.Labels[wbv1.NodeLabel] },
			Released: wbv1.CommandReleased},
		&CleanupReconciler[*wbv1.Artifact]{Client: c, Now: now, NodeLostAfter: lostAfter, Kind: "Artifact",
			NewObj:   func() *wbv1.Artifact { return &wbv1.Artifact{} },
			NodeOf:   func(o *wbv1.Artifact) string { return o.Labels[wbv1.NodeLabel] },
			Released: wbv1.ArtifactReleased},
	}
}

package controllers

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/testkit"
)

// commandCleanup is the cleanup reconciler of TerminalCommands as cmd/manager builds it.
func commandCleanup(t *testing.T, now func() time.Time) *CleanupReconciler[*wbv1.TerminalCommand] {
	t.Helper()
	for _, r := range cleanupReconcilers(env.Client, now, 0) {
		if c, ok := r.(*CleanupReconciler[*wbv1.TerminalCommand]); ok {
			return c
		}
	}
	t.Fatal("cleanupReconcilers has no TerminalCommand reconciler")
	return nil
}

// TestCleanupWaitsForTheNodeThenReleases: a deleted command its node still holds (admitted,
// not final) keeps the cleanup finalizer, requeued no later than the node-lost bound; the
// node's final condition releases it; a node silent past the bound releases it without a
// report; a live admitted command that lost its finalizer gets it back.
func TestCleanupWaitsForTheNodeThenReleases(t *testing.T) {
	ctx := context.Background()
	f := newGateFixture(t, "node-cleanup-a")
	wn := &wbv1.WorkbenchNode{ObjectMeta: metav1.ObjectMeta{Name: f.node}}
	testkit.Must(t, env.Client.Create(ctx, wn))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), wn) })
	wn.Status.HeartbeatTime = &metav1.Time{Time: f.clock.Now()}
	testkit.Must(t, env.Client.Status().Update(ctx, wn))
	synced(t, wn)
	gate := f.reconciler(t, nil)
	cr := commandCleanup(t, f.clock.Now)

	admitted := func(name string, del bool) *wbv1.TerminalCommand {
		c := f.command(t, name, "/usr/bin/git", "--no-pager", "status")
		reconcileOnce(t, gate, c)
		c = get(t, c)
		if !isTrueCond(c.Status.Conditions, wbv1.ConditionAdmitted) || !controllerutil.ContainsFinalizer(c, wbv1.CleanupFinalizer) {
			t.Fatalf("command %s: admitted %v, finalizers %v", name, c.Status.Conditions, c.Finalizers)
		}
		if del {
			testkit.Must(t, env.Client.Delete(ctx, c))
		}
		return get(t, c)
	}

	held := admitted("held", true)
	res, err := cr.Reconcile(ctx, reqOf(held))
	testkit.Must(t, err)
	if held = get(t, held); !controllerutil.ContainsFinalizer(held, wbv1.CleanupFinalizer) {
		t.Fatal("the finalizer of a command its node still holds was released")
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > DefaultNodeLostAfter {
		t.Fatalf("a held command is looked at again within the node-lost bound; requeue %v", res.RequeueAfter)
	}
	// The node reports the outcome: it holds nothing more.
	done := metav1.Condition{Type: wbv1.ConditionCompleted, Status: metav1.ConditionTrue, Reason: wbv1.ReasonCancelled, Message: "stopped", ObservedGeneration: held.Generation, LastTransitionTime: metav1.Now()}
	held.Status.Conditions = append(held.Status.Conditions, done)
	testkit.Must(t, env.Client.Status().Update(ctx, held))
	reconcileOnce(t, cr, held)
	if err := env.Client.Get(ctx, reqOf(held).NamespacedName, &wbv1.TerminalCommand{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a command its node released is still stored: %v", err)
	}

	lost := admitted("lost", true)
	f.clock.Advance(DefaultNodeLostAfter - 5*time.Second) // (the stored heartbeat is cut to whole seconds)
	reconcileOnce(t, cr, lost)
	if err := env.Client.Get(ctx, reqOf(lost).NamespacedName, lost); err != nil || !controllerutil.ContainsFinalizer(lost, wbv1.CleanupFinalizer) {
		t.Fatalf("released before the node-lost bound: %v, finalizers %v", err, lost.Finalizers)
	}
	f.clock.Advance(10 * time.Second)
	reconcileOnce(t, cr, lost)
	if err := env.Client.Get(ctx, reqOf(lost).NamespacedName, &wbv1.TerminalCommand{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a command of a node silent past the bound is still stored: %v", err)
	}

	live := admitted("live", false)
	controllerutil.RemoveFinalizer(live, wbv1.CleanupFinalizer)
	testkit.Must(t, env.Client.Update(ctx, live))
	reconcileOnce(t, cr, live)
	if live = get(t, live); !controllerutil.ContainsFinalizer(live, wbv1.CleanupFinalizer) {
		t.Fatalf("a live command without the cleanup finalizer: %v", live.Finalizers)
	}
}

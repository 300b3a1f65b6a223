package controllers

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/testkit"
	"sensorium.dev/workbench/webhooks"
)

// The package tests run the reconcilers against a real API server (envtest) with the
// admission webhooks served and no controller started: each test calls Reconcile itself,
// so what it asserts is the reconciler's own write, with nothing racing it.
var env *envtest.Env

func TestMain(m *testing.M) {
	envtest.Main(m, "controllers", envtest.Options{Setup: webhooks.SetupWithManager}, &env)
}

func reconcileOnce(t *testing.T, r interface {
	Reconcile(context.Context, ctrl.Request) (ctrl.Result, error)
}, obj client.Object) {
	t.Helper()
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}})
	testkit.Must(t, err)
}

// statusManagers are the field managers of obj's status subresource.
func statusManagers(obj client.Object) []string {
	var out []string
	for _, mf := range obj.GetManagedFields() {
		if mf.Subresource == "status" {
			out = append(out, mf.Manager)
		}
	}
	return out
}

// TestCommandProfileStatusHasOneOwner: reconciling a valid profile writes its projection
// (Valid, observedGeneration, the effective digest) under the controller's own field
// manager and nobody else's; a second reconcile of the unchanged profile writes nothing.
func TestCommandProfileStatusHasOneOwner(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "ctl-")
	p := &wbv1.CommandProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: ns},
		Spec: wbv1.CommandProfileSpec{
			Executable: "/usr/bin/git", FixedArgs: []string{"--no-pager"}, AllowedArgPrefixes: []string{"status"},
			AllowedRoots: []string{"repo"}, MaxTimeoutSeconds: 120, MaxOutputBytes: 1 << 20,
		},
	}
	testkit.Must(t, env.Client.Create(ctx, p))
	r := &CommandProfileReconciler{Client: env.Client}
	reconcileOnce(t, r, p)
	var got wbv1.CommandProfile
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(p), &got))
	valid := metaCondition(got.Status.Conditions, wbv1.ConditionValid)
	if valid == nil || valid.Status != metav1.ConditionTrue || got.Status.ObservedGeneration != got.Generation || got.Status.EffectiveDigest == "" {
		t.Fatalf("status after reconcile: %+v", got.Status)
	}
	if m := statusManagers(&got); len(m) != 1 || m[0] != FieldManagerPrefix+"commandprofile" {
		t.Fatalf("status field managers %v, want only %s", m, FieldManagerPrefix+"commandprofile")
	}
	rv := got.ResourceVersion
	reconcileOnce(t, r, &got)
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(p), &got))
	if got.ResourceVersion != rv {
		t.Fatalf("a reconcile of an unchanged profile wrote it again (resourceVersion %s -> %s)", rv, got.ResourceVersion)
	}
}

func metaCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}

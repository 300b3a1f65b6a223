package integration

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/kstate"
)

// TestGrantNotInheritedByRecreatedEnvironment: a remembered grant binds to the Environment
// object it was reviewed on (its UID). After the environment is deleted and recreated under
// the same name, the same argv is not admitted by the old grant: it is held AwaitingConsent
// again, and the new consent request names the new object.
func TestGrantNotInheritedByRecreatedEnvironment(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	argv := []string{"/usr/bin/git", "--no-pager", "diff", "--stat"}
	askConsent(t, env.Client, ns, "diff", argv...)
	var old wbv1.Environment
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e"}, &old))
	if cr := getRequest(t, ns, "diff-consent"); cr.Spec.Descriptor.EnvironmentUID != old.UID {
		t.Fatalf("the consent request names environment uid %q, not %q", cr.Spec.Descriptor.EnvironmentUID, old.UID)
	}
	op := operator(t, ns, "alice")
	must(t, op.Create(ctx, grant(ns, "g1", "diff-consent", wbv1.ConsentRememberExactArgv)))
	waitAdmittedBy(t, ns, "diff", "g1")

	// Delete the environment (no node holds it here: its cleanup finalizer is released by
	// hand, as a node would after teardown) and recreate it under the same name.
	must(t, env.Client.Delete(ctx, &old))
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e wbv1.Environment
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e"}, &e); err != nil {
			return client.IgnoreNotFound(err)
		}
		e.Finalizers = nil
		return client.IgnoreNotFound(env.Client.Update(ctx, &e))
	}))
	kstate.Gone(t, env.Client, 20*time.Second, ns, "e", &wbv1.Environment{})
	must(t, env.Client.Create(ctx, environment(ns, "e")))
	fresh := waitPlaced(t, ns, "e") // placed again
	if fresh.UID == old.UID {
		t.Fatal("the recreated environment has the old UID")
	}
	c := askConsent(t, env.Client, ns, "diff-again", argv...)
	if c.Status.AdmittedBy == "g1" {
		t.Fatalf("the old grant admitted a command on the recreated environment: %+v", c.Status)
	}
	cr := getRequest(t, ns, c.Status.ConsentRequestRef)
	if cr.Spec.Descriptor.EnvironmentUID != fresh.UID {
		t.Fatalf("the new consent request names environment uid %q, not the new %q", cr.Spec.Descriptor.EnvironmentUID, fresh.UID)
	}
}

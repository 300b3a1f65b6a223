package actionnode

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/kstate"
)

// awaitingConsent waits until run names its ConsentRequest and returns the request's name.
func awaitingConsent(t *testing.T, ns, run string) string {
	t.Helper()
	r := kstate.Until(t, env.Client, 30*time.Second, "run "+run+" awaiting consent", ns, run, &wbv1.ActionRun{},
		func(r *wbv1.ActionRun) bool {
			return r.Status.ConsentRequestRef != ""
		})
	return r.Status.ConsentRequestRef
}

func grant(op client.Client, ns, request, name string, scope wbv1.ConsentScope) error {
	return op.Create(context.Background(), envtest.ConsentGrant(ns, name, request, scope))
}

// TestC7CatalogEditedBeforeConsentNeverRuns: a C7 run approved allow-once runs on the node
// (the control); a second run held for consent whose catalog is edited before the operator
// approves ends Refused action-catalog-unauthorized and the node never starts it.
func TestC7CatalogEditedBeforeConsentNeverRuns(t *testing.T) {
	ns, _ := setup(t)
	op := env.BoundAs(t, "workbench-operator", "op-"+ns, ns)
	cat := catalog(t, ns, "cat", perl(t, ns, "gated", "C7", `print "gated ran\n";`))
	start(t, ns, "cat", "r0", "gated", nil)
	must(t, grant(op, ns, awaitingConsent(t, ns, "r0"), "g0", wbv1.ConsentAllowOnce))
	r := final(t, ns, "r0")
	succeeded(t, r)
	contains(t, "stdout", r.Status.Stdout, "gated ran")

	start(t, ns, "cat", "r1", "gated", nil)
	req := awaitingConsent(t, ns, "r1")
	must(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(cat), cat))
	cat.Spec.Actions[0].DefaultTimeoutSeconds = 31
	must(t, env.Client.Update(context.Background(), cat))
	if err := grant(op, ns, req, "g1", wbv1.ConsentAllowOnce); err != nil {
		t.Logf("grant after the edit: %v", err)
	}
	r = final(t, ns, "r1")
	if refusalCode(r) != string(actuation.CodeActionCatalogUnauthorized) {
		t.Fatalf("refusal %+v, want %s", r.Status.Refusal, actuation.CodeActionCatalogUnauthorized)
	}
	if r.Status.StartTime != nil || r.Status.Stdout != "" || r.Status.ExitCode != nil || r.Status.NodeName != "" {
		t.Fatalf("the node started the run: %+v", r.Status)
	}
}

// TestC7AddToCatalogRunsOnlyOnceSigned: add-to-catalog refuses the prompting run, and the
// proposed catalog's action runs on the node (as C1, without a prompt) only after it is signed.
func TestC7AddToCatalogRunsOnlyOnceSigned(t *testing.T) {
	ctx := context.Background()
	ns, _ := setup(t)
	op := env.BoundAs(t, "workbench-operator", "op-"+ns, ns)
	catalog(t, ns, "cat", perl(t, ns, "gated", "C7", `print "remembered ran\n";`))
	start(t, ns, "cat", "r0", "gated", nil)
	must(t, grant(op, ns, awaitingConsent(t, ns, "r0"), "g0", wbv1.ConsentAddToCatalog))
	r := final(t, ns, "r0")
	if refusalCode(r) != string(actuation.CodeActionCatalogUnauthorized) || r.Status.CatalogDeltaRef == "" || r.Status.StartTime != nil {
		t.Fatalf("add-to-catalog run: %+v", r.Status)
	}
	delta := &wbv1.ActionCatalog{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: r.Status.CatalogDeltaRef}, delta))
	if delta.Signature != nil {
		t.Fatalf("the proposal is signed: %+v", delta.Signature)
	}
	sign(t, delta)
	r = final(t, ns, start(t, ns, delta.Name, "r1", "gated", nil).Name)
	succeeded(t, r)
	contains(t, "stdout", r.Status.Stdout, "remembered ran")
	if r.Status.Class != wbv1.ActionClassReadOnlySpawn || r.Status.ConsentRequestRef != "" {
		t.Fatalf("signed proposal run: class %s consentRequestRef %q", r.Status.Class, r.Status.ConsentRequestRef)
	}
}

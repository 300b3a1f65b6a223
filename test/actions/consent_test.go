package actions

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/envtest"
)

// TestOperatorGatedRun: a C7 run waits for an operator's decision on its own
// ConsentRequest; allow-once admits exactly that run, deny refuses with consent-denied.
func TestOperatorGatedRun(t *testing.T) {
	ctx := context.Background()
	f := signedFixture(t)
	op := env.BoundAs(t, "workbench-operator", "carol", f.ns)

	r := f.askConsent(t, "gated", `{"msg":"a"}`)
	cr := f.consentRequest(t, r)
	if cr.Spec.Descriptor.Capability != wbv1.CapabilityActionRun || cr.Spec.Descriptor.CommandUID != r.UID || len(cr.Spec.Descriptor.Argv) == 0 {
		t.Fatalf("request does not bind the run: %+v", cr.Spec.Descriptor)
	}
	if r.Labels[wbv1.NodeLabel] != "" {
		t.Fatalf("a run awaiting consent must not be bound to a node: %v", r.Labels)
	}
	must(t, op.Create(ctx, envtest.ConsentGrant(f.ns, "g-gated", cr.Name, wbv1.ConsentAllowOnce)))
	r = f.waitRun(t, "gated", "admitted by consent", admitted)
	if r.Labels[wbv1.NodeLabel] != f.node {
		t.Fatalf("admitted run not bound: %v", r.Labels)
	}

	r = f.askConsent(t, "gated-b", `{"msg":"a"}`)
	must(t, op.Create(ctx, envtest.ConsentGrant(f.ns, "g-deny", r.Status.ConsentRequestRef, wbv1.ConsentDeny)))
	r = f.waitRun(t, "gated-b", "refused", func(r *wbv1.ActionRun) bool { return r.Status.Phase == wbv1.ActionRunRefused })
	if r.Status.Refusal == nil || r.Status.Refusal.Code != "consent-denied" {
		t.Fatalf("refusal = %+v", r.Status.Refusal)
	}
}

// TestGatedRunDeletedCollectsRequest: deleting a C7 run that waits for consent deletes its
// ConsentRequest (no durable grant can need it).
func TestGatedRunDeletedCollectsRequest(t *testing.T) {
	ctx := context.Background()
	f := signedFixture(t)
	r := f.askConsent(t, "gone", `{"msg":"a"}`)
	must(t, env.Client.Delete(ctx, r))
	eventually(t, 30e9, "consent request "+r.Status.ConsentRequestRef+" collected", func() (bool, string) {
		var cr wbv1.ConsentRequest
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: r.Status.ConsentRequestRef}, &cr)
		return err != nil && client.IgnoreNotFound(err) == nil, "still there"
	})
}

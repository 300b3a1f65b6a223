package actions

import (
	"context"
	"strings"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/envtest"
)

// TestActionRunCorrelation (issue 30 item 5): a run created without a correlation id is given
// one, a supplied one is kept, and the run's ConsentRequest carries the same id; the run's
// createdBy is the creating user whatever the client sent.
func TestActionRunCorrelation(t *testing.T) {
	ctx := context.Background()
	f := signedFixture(t)

	plain := f.run("corr-gen", "node.gated", `{"msg":"a"}`)
	plain.Spec.CreatedBy = "someone-else"
	must(t, env.Client.Create(ctx, plain))
	r := f.awaitingConsent(t, "corr-gen")
	id := r.Labels[wbv1.CorrelationLabel]
	if !strings.HasPrefix(id, "wb-") {
		t.Fatalf("a run without a correlation id must be given one, labels %v", r.Labels)
	}
	if r.Spec.CreatedBy == "" || r.Spec.CreatedBy == "someone-else" {
		t.Fatalf("createdBy must be the creating user, got %q", r.Spec.CreatedBy)
	}
	cr := f.consentRequest(t, r)
	if got := cr.Labels[wbv1.CorrelationLabel]; got != id {
		t.Fatalf("consent request correlation id = %q, want the run's %q", got, id)
	}
	if cr.Spec.Descriptor.Requester != r.Spec.CreatedBy {
		t.Fatalf("consent request requester = %q, want the run's createdBy %q", cr.Spec.Descriptor.Requester, r.Spec.CreatedBy)
	}

	supplied := f.run("corr-kept", "node.gated", `{"msg":"b"}`)
	supplied.Labels = map[string]string{wbv1.CorrelationLabel: "agent-trace-42"}
	must(t, env.Client.Create(ctx, supplied))
	r = f.awaitingConsent(t, "corr-kept")
	if got := r.Labels[wbv1.CorrelationLabel]; got != "agent-trace-42" {
		t.Fatalf("a supplied correlation id must be kept, got %q", got)
	}
	cr = f.consentRequest(t, r)
	if got := cr.Labels[wbv1.CorrelationLabel]; got != "agent-trace-42" {
		t.Fatalf("consent request correlation id = %q, want agent-trace-42", got)
	}

	// The CLI supplies an id and shows the one a run carries (supplied or generated).
	code, out, errOut := kw(t, f.ns, "-o", "json", "action", "run", "tools", "node.echo", "--env", "e", "--param", "msg=x",
		"--correlation-id", "cli-trace-7", "--wait=false")
	if code != 0 || !strings.Contains(errOut, "(correlation id cli-trace-7)") {
		t.Fatalf("action run --correlation-id exited %d: %s %s", code, out, errOut)
	}
	if code, out, errOut = kw(t, f.ns, "action", "run", "tools", "node.echo", "--env", "e", "--param", "msg=y", "--wait=false"); code != 0 ||
		!strings.Contains(errOut, "(correlation id wb-") {
		t.Fatalf("action run must show the generated correlation id, exited %d: %s %s", code, out, errOut)
	}

	// createdBy cannot be rewritten after creation.
	r.Spec.CreatedBy = "someone-else"
	if err := env.Client.Update(ctx, r); err == nil || !strings.Contains(err.Error(), "createdBy") {
		t.Fatalf("rewriting createdBy must be refused, got %v", err)
	}
}

// TestActionRunConsentCooldown (issue 30 item 4): after an operator denies a C7 run, the same
// identity asking for the same rendered argv again is refused with consent-cooldown without a
// new prompt; another argv still asks.
func TestActionRunConsentCooldown(t *testing.T) {
	ctx := context.Background()
	f := signedFixture(t)
	op := env.BoundAs(t, "workbench-operator", "carol", f.ns)

	r := f.askConsent(t, "cd-a", `{"msg":"cool"}`)
	must(t, op.Create(ctx, envtest.ConsentGrant(f.ns, "g-cd-deny", r.Status.ConsentRequestRef, wbv1.ConsentDeny)))
	r = f.waitRun(t, "cd-a", "refused", func(r *wbv1.ActionRun) bool { return r.Status.Phase == wbv1.ActionRunRefused })
	if r.Status.Refusal == nil || r.Status.Refusal.Code != "consent-denied" {
		t.Fatalf("refusal = %+v", r.Status.Refusal)
	}

	must(t, env.Client.Create(ctx, f.run("cd-b", "node.gated", `{"msg":"cool"}`)))
	r = f.waitRun(t, "cd-b", "decided", func(r *wbv1.ActionRun) bool {
		return r.Status.Phase == wbv1.ActionRunRefused || r.Status.ConsentRequestRef != ""
	})
	if r.Status.Refusal == nil || r.Status.Refusal.Code != "consent-cooldown" || r.Status.ConsentRequestRef != "" {
		t.Fatalf("second ask of a denied argv must cool down without a prompt: refusal %+v, consent request %q", r.Status.Refusal, r.Status.ConsentRequestRef)
	}

	must(t, env.Client.Create(ctx, f.run("cd-c", "node.gated", `{"msg":"other"}`)))
	f.awaitingConsent(t, "cd-c")
}

package integration

import (
	"context"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// setConsentPolicy writes the WorkbenchPolicy singleton's consent block for one test (the
// integration tests run one at a time) and removes the policy afterwards.
func setConsentPolicy(t *testing.T, c *wbv1.ConsentPolicySpec) {
	t.Helper()
	ctx := context.Background()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p wbv1.WorkbenchPolicy
		err := env.Client.Get(ctx, client.ObjectKey{Name: wbv1.WorkbenchPolicyName}, &p)
		if apierrors.IsNotFound(err) {
			return env.Client.Create(ctx, &wbv1.WorkbenchPolicy{ObjectMeta: metav1.ObjectMeta{Name: wbv1.WorkbenchPolicyName},
				Spec: wbv1.WorkbenchPolicySpec{Consent: c}})
		}
		if err != nil {
			return err
		}
		p.Spec.Consent = c
		return env.Client.Update(ctx, &p)
	}))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &wbv1.WorkbenchPolicy{ObjectMeta: metav1.ObjectMeta{Name: wbv1.WorkbenchPolicyName}})
	})
}

// TestConsentPolicyNotGrantable: a profile the policy's consent.durableGrants does not name
// is offered deny and allow-once only, a remembered grant for it is refused with
// consent-capability-not-grantable, and allow-once still works.
func TestConsentPolicyNotGrantable(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	setConsentPolicy(t, &wbv1.ConsentPolicySpec{DurableGrants: []wbv1.DurableGrantRule{
		{Capability: wbv1.CapabilityTerminalCommand, Profiles: []string{"some-other-profile"}},
	}})
	askConsent(t, env.Client, ns, "np", "/usr/bin/git", "--no-pager", "describe")
	cr := getRequest(t, ns, "np-consent")
	if slices.Contains(cr.Spec.Options, wbv1.ConsentRememberExactArgv) || slices.Contains(cr.Spec.Options, wbv1.ConsentRememberArgvPrefix) ||
		!slices.Contains(cr.Spec.Options, wbv1.ConsentAllowOnce) {
		t.Fatalf("options offered for a profile no durable rule names: %v", cr.Spec.Options)
	}
	op := operator(t, ns, "erin")
	mustRefuse(t, op.Create(ctx, grant(ns, "g-rem", "np-consent", wbv1.ConsentRememberExactArgv)), "consent-capability-not-grantable")
	g := grant(ns, "g-pre", "np-consent", wbv1.ConsentRememberArgvPrefix)
	g.Spec.PrefixLength = ptr(int32(2))
	mustRefuse(t, op.Create(ctx, g), "consent-capability-not-grantable")
	must(t, op.Create(ctx, grant(ns, "g-once", "np-consent", wbv1.ConsentAllowOnce)))
	waitAdmittedBy(t, ns, "np", "g-once") // allow-once still admits
}

// TestConsentPolicyRevokesGrantability: a remembered grant given while the policy allowed
// it stops authorizing once the policy no longer does: the grant reads Unbound with
// consent-capability-not-grantable, and the effective profile drops its entry.
func TestConsentPolicyRevokesGrantability(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	askConsent(t, env.Client, ns, "rv", "/usr/bin/git", "--no-pager", "shortlog")
	op := operator(t, ns, "frank")
	must(t, op.Create(ctx, grant(ns, "g", "rv-consent", wbv1.ConsentRememberExactArgv)))
	waitProfile(t, ns, "remembered grant projected", func(p *wbv1.CommandProfile) bool { return len(p.Status.ConsentEntries) == 1 })
	setConsentPolicy(t, &wbv1.ConsentPolicySpec{DurableGrants: []wbv1.DurableGrantRule{
		{Capability: wbv1.CapabilityTerminalCommand, Namespaces: []string{"not-" + ns}},
	}})
	waitGrant(t, ns, "g", "grant no longer grantable", func(g *wbv1.ConsentGrant) bool {
		return g.Status.State == wbv1.ConsentGrantUnbound && hasDiag(g.Status.Diagnostics, "consent-capability-not-grantable")
	})
	waitProfile(t, ns, "projection drops the grant", func(p *wbv1.CommandProfile) bool { return len(p.Status.ConsentEntries) == 0 })
	// The same argv asks again instead of running on the no-longer-grantable grant.
	askConsent(t, env.Client, ns, "rv-2", "/usr/bin/git", "--no-pager", "shortlog")
}

// TestConsentDenyCooldown: after an operator denies an argv, the same identity's next
// command with that argv is refused (consent-cooldown) without a new request; another
// identity still asks.
func TestConsentDenyCooldown(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	setConsentPolicy(t, &wbv1.ConsentPolicySpec{DenyCooldownSeconds: ptr(int64(600))})
	argv := []string{"/usr/bin/git", "--no-pager", "reflog"}
	askConsent(t, env.Client, ns, "d1", argv...)
	op := operator(t, ns, "gina")
	must(t, op.Create(ctx, grant(ns, "g-deny", "d1-consent", wbv1.ConsentDeny)))
	waitCommandPhase(t, ns, "d1", wbv1.CommandRefused)

	// Same identity, same argv: cooled down, no new request.
	again := command(ns, "d2", argv...)
	must(t, env.Client.Create(ctx, again))
	c := waitCommandPhase(t, ns, "d2", wbv1.CommandRefused)
	if c.Status.Refusal == nil || c.Status.Refusal.Code != "consent-cooldown" || c.Status.ConsentRequestRef != "" {
		t.Fatalf("second ask of a denied argv: %+v", c.Status)
	}
	var cr wbv1.ConsentRequest
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "d2-consent"}, &cr); !apierrors.IsNotFound(err) {
		t.Fatalf("a cooled-down argv must not create a consent request: %v", err)
	}
	// Another argv of the same identity still asks.
	askConsent(t, env.Client, ns, "d3", "/usr/bin/git", "--no-pager", "reflog", "--all")
	// Another identity with the same argv still asks.
	agent := env.BoundAs(t, "workbench-agent", "agent-cool", ns)
	askConsent(t, agent, ns, "d4", argv...)
}

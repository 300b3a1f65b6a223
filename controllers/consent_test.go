package controllers

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/testkit"
)

// askConsent creates a command whose argv the fixture's profile does not admit and runs the
// gate once, which creates its ConsentRequest; it returns the command and the request.
func (f *gateFixture) askConsent(t *testing.T, r *TerminalCommandReconciler, name string, argv ...string) (*wbv1.TerminalCommand, *wbv1.ConsentRequest) {
	t.Helper()
	c := f.command(t, name, argv...)
	reconcileOnce(t, r, c)
	c = get(t, c)
	if c.Status.ConsentRequestRef == "" {
		t.Fatalf("command %s asked no consent: %+v", name, c.Status)
	}
	cr := get(t, &wbv1.ConsentRequest{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: c.Status.ConsentRequestRef}})
	return c, cr
}

func (f *gateFixture) requestReconciler(t *testing.T) *ConsentRequestReconciler {
	return &ConsentRequestReconciler{Client: cachedClient(t), Recorder: recorder(t, "test-consent"), Now: f.clock.Now, Cooldown: actuation.NewDenyCooldown()}
}

func (f *gateFixture) grantReconciler(t *testing.T) *ConsentGrantReconciler {
	return &ConsentGrantReconciler{Client: cachedClient(t), Recorder: recorder(t, "test-consent"), Now: f.clock.Now}
}

func (f *gateFixture) grant(t *testing.T, name, request string, scope wbv1.ConsentScope) *wbv1.ConsentGrant {
	t.Helper()
	g := &wbv1.ConsentGrant{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: wbv1.ConsentGrantSpec{RequestRef: wbv1.ObjectName(request), Scope: scope}}
	testkit.Must(t, env.Client.Create(context.Background(), g))
	synced(t, g)
	return g
}

// TestConsentRequestExpiresFailClosed: a request nobody decides is Pending (requeued for its
// expiry) until its timeout, then Expired; the command it held is refused consent-expired and
// a grant for the expired request is refused at admission.
func TestConsentRequestExpiresFailClosed(t *testing.T) {
	f := newGateFixture(t, "node-consent-a")
	r := f.reconciler(t, nil)
	c, cr := f.askConsent(t, r, "diff", "/usr/bin/git", "--no-pager", "diff")
	rr := f.requestReconciler(t)
	res, err := rr.Reconcile(context.Background(), reqOf(cr))
	testkit.Must(t, err)
	cr = get(t, cr)
	// (the test clock was read before the request was created, so it may trail its creation)
	if cr.Status.Decision != wbv1.DecisionPending || res.RequeueAfter <= 0 || res.RequeueAfter > time.Duration(cr.Spec.TimeoutSeconds)*time.Second+time.Minute {
		t.Fatalf("an undecided request: decision %s, requeue %v (timeout %ds)", cr.Status.Decision, res.RequeueAfter, cr.Spec.TimeoutSeconds)
	}
	f.clock.Advance(time.Duration(cr.Spec.TimeoutSeconds)*time.Second + time.Minute)
	reconcileOnce(t, rr, cr)
	if cr = get(t, cr); cr.Status.Decision != wbv1.DecisionExpired || cr.Status.DecidedAt == nil {
		t.Fatalf("a request past its timeout: %+v", cr.Status)
	}
	synced(t, cr)
	reconcileOnce(t, r, c)
	if c = get(t, c); c.Status.Refusal == nil || c.Status.Refusal.Code != string(actuation.CodeConsentExpired) {
		t.Fatalf("the command of an expired request: phase %s refusal %+v", c.Status.Phase, c.Status.Refusal)
	}
	g := &wbv1.ConsentGrant{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: f.ns}, Spec: wbv1.ConsentGrantSpec{RequestRef: wbv1.ObjectName(cr.Name), Scope: wbv1.ConsentAllowOnce}}
	if err := env.Client.Create(context.Background(), g); err == nil || !strings.Contains(err.Error(), string(actuation.CodeConsentExpired)+":") {
		t.Fatalf("a grant for an expired request: %v, want refused %s", err, actuation.CodeConsentExpired)
	}
}

// TestConsentRequestCollectedWithItsCommand: a request whose command is deleted is deleted
// with it, unless a remembered grant that answered it is still in force (the grant outlives
// the command, so its request must too).
func TestConsentRequestCollectedWithItsCommand(t *testing.T) {
	ctx := context.Background()
	f := newGateFixture(t, "node-consent-b")
	r, rr := f.reconciler(t, nil), f.requestReconciler(t)
	plain, plainCR := f.askConsent(t, r, "plain", "/usr/bin/git", "--no-pager", "diff")
	kept, keptCR := f.askConsent(t, r, "kept", "/usr/bin/git", "--no-pager", "log")
	f.grant(t, "remember", keptCR.Name, wbv1.ConsentRememberExactArgv)
	for _, c := range []*wbv1.TerminalCommand{plain, kept} {
		// the cleanup finalizer the binding webhook adds is the cleanup controller's to remove
		c = get(t, c)
		c.Finalizers = nil
		testkit.Must(t, env.Client.Update(ctx, c))
		testkit.Must(t, env.Client.Delete(ctx, c))
	}
	testkit.Eventually(t, 10*time.Second, "the cache no longer holds the deleted commands", func() (bool, string) {
		err1 := cachedClient(t).Get(ctx, client.ObjectKeyFromObject(plain), &wbv1.TerminalCommand{})
		err2 := cachedClient(t).Get(ctx, client.ObjectKeyFromObject(kept), &wbv1.TerminalCommand{})
		return apierrors.IsNotFound(err1) && apierrors.IsNotFound(err2), "still cached"
	})
	reconcileOnce(t, rr, plainCR)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(plainCR), &wbv1.ConsentRequest{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the request of a deleted command was kept: %v", err)
	}
	reconcileOnce(t, rr, keptCR)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(keptCR), &wbv1.ConsentRequest{}); err != nil {
		t.Fatalf("the request a remembered grant answered was deleted with its command: %v", err)
	}
}

// TestConsentGrantLifecycle: a remembered grant of an operator who may approve is Active;
// revoking it makes it Revoked with consent-revoked; past its expiry it is Expired with
// consent-expired; once its request is gone it is Unbound with consent-scope-invalid. Only
// an Active grant reaches the effective profile.
func TestConsentGrantLifecycle(t *testing.T) {
	ctx := context.Background()
	f := newGateFixture(t, "node-consent-c")
	r, gr := f.reconciler(t, nil), f.grantReconciler(t)
	_, cr := f.askConsent(t, r, "diff", "/usr/bin/git", "--no-pager", "diff")
	_, cr2 := f.askConsent(t, r, "log", "/usr/bin/git", "--no-pager", "log")
	g := f.grant(t, "remember", cr.Name, wbv1.ConsentRememberExactArgv)
	g2 := f.grant(t, "remember-2", cr2.Name, wbv1.ConsentRememberExactArgv)
	reconcileOnce(t, gr, g)
	if g = get(t, g); g.Status.State != wbv1.ConsentGrantActive || g.Status.Operator != "admin" || g.Status.ApprovalRef == "" || len(g.Status.Diagnostics) != 0 {
		t.Fatalf("an operator's grant: %+v", g.Status)
	}
	profiles := func() []wbv1.ObjectName {
		synced(t, get(t, g), get(t, g2))
		reconcileOnce(t, &CommandProfileReconciler{Client: cachedClient(t)}, f.prof)
		var out []wbv1.ObjectName
		for _, e := range get(t, &wbv1.CommandProfile{ObjectMeta: f.prof.ObjectMeta}).Status.ConsentEntries {
			out = append(out, e.GrantRef)
		}
		return out
	}
	if got := profiles(); !slices.Equal(got, []wbv1.ObjectName{"remember"}) {
		t.Fatalf("effective profile entries %v, want only the active grant", got)
	}

	g.Spec.Revoked = testkit.Ptr(true)
	testkit.Must(t, env.Client.Update(ctx, g))
	synced(t, g)
	reconcileOnce(t, gr, g)
	if g = get(t, g); g.Status.State != wbv1.ConsentGrantRevoked || !hasDiagnostic(g.Status.Diagnostics, actuation.CodeConsentRevoked) {
		t.Fatalf("a revoked grant: %+v", g.Status)
	}
	if got := profiles(); len(got) != 0 {
		t.Fatalf("a revoked grant stays in the effective profile: %v", got)
	}

	reconcileOnce(t, gr, g2)
	testkit.Must(t, env.Client.Delete(ctx, cr2))
	testkit.Eventually(t, 10*time.Second, "the cache no longer holds the deleted request", func() (bool, string) {
		return apierrors.IsNotFound(cachedClient(t).Get(ctx, client.ObjectKeyFromObject(cr2), &wbv1.ConsentRequest{})), "still cached"
	})
	reconcileOnce(t, gr, g2)
	if g2 = get(t, g2); g2.Status.State != wbv1.ConsentGrantUnbound || !hasDiagnostic(g2.Status.Diagnostics, actuation.CodeConsentScopeInvalid) {
		t.Fatalf("a grant whose request is gone: %+v", g2.Status)
	}

	_, cr3 := f.askConsent(t, r, "blame", "/usr/bin/git", "--no-pager", "blame")
	g3 := f.grant(t, "remember-3", cr3.Name, wbv1.ConsentRememberExactArgv)
	f.clock.Advance(DefaultGrantLifetime + time.Minute)
	reconcileOnce(t, gr, g3)
	if g3 = get(t, g3); g3.Status.State != wbv1.ConsentGrantExpired || !hasDiagnostic(g3.Status.Diagnostics, actuation.CodeConsentExpired) {
		t.Fatalf("a grant past its lifetime: %+v", g3.Status)
	}
}

// TestConsentPolicyWithdrawsRememberedGrants: under a WorkbenchPolicy whose consent block
// names no durable rule for this namespace, a new request offers deny and allow-once only,
// and a remembered grant given before stops authorizing (Unbound,
// consent-capability-not-grantable) without being deleted.
func TestConsentPolicyWithdrawsRememberedGrants(t *testing.T) {
	ctx := context.Background()
	f := newGateFixture(t, "node-consent-d")
	r, gr := f.reconciler(t, nil), f.grantReconciler(t)
	_, cr := f.askConsent(t, r, "diff", "/usr/bin/git", "--no-pager", "diff")
	if !slices.Contains(cr.Spec.Options, wbv1.ConsentRememberExactArgv) {
		t.Fatalf("without a policy terminal commands may be remembered; options %v", cr.Spec.Options)
	}
	g := f.grant(t, "remember", cr.Name, wbv1.ConsentRememberExactArgv)
	reconcileOnce(t, gr, g)
	if g = get(t, g); g.Status.State != wbv1.ConsentGrantActive {
		t.Fatalf("grant before the policy: %+v", g.Status)
	}

	pol := &wbv1.WorkbenchPolicy{ObjectMeta: metav1.ObjectMeta{Name: wbv1.WorkbenchPolicyName}, Spec: wbv1.WorkbenchPolicySpec{Consent: &wbv1.ConsentPolicySpec{
		DurableGrants: []wbv1.DurableGrantRule{{Capability: wbv1.CapabilityTerminalCommand, Namespaces: []string{"some-other-namespace"}}}}}}
	testkit.Must(t, env.Client.Create(ctx, pol))
	t.Cleanup(func() {
		// the policy is cluster-wide: later tests see the default again
		testkit.Must(t, env.Client.Delete(context.Background(), pol))
		testkit.Eventually(t, 10*time.Second, "the cache no longer holds the policy", func() (bool, string) {
			return apierrors.IsNotFound(cachedClient(t).Get(context.Background(), client.ObjectKeyFromObject(pol), &wbv1.WorkbenchPolicy{})), "still cached"
		})
	})
	synced(t, pol)
	reconcileOnce(t, gr, g)
	if g = get(t, g); g.Status.State != wbv1.ConsentGrantUnbound || !hasDiagnostic(g.Status.Diagnostics, actuation.CodeConsentCapabilityNotGrantable) {
		t.Fatalf("a remembered grant the policy no longer allows: %+v", g.Status)
	}
	_, cr2 := f.askConsent(t, r, "log", "/usr/bin/git", "--no-pager", "log")
	if slices.ContainsFunc(cr2.Spec.Options, func(s wbv1.ConsentScope) bool { return actuation.DurableScope(actuation.ConsentScope(s)) }) ||
		!slices.Contains(cr2.Spec.Options, wbv1.ConsentAllowOnce) {
		t.Fatalf("options offered under a policy that allows no remembered grant here: %v", cr2.Spec.Options)
	}
}

func hasDiagnostic(ds []wbv1.Diagnostic, code actuation.Code) bool {
	return slices.ContainsFunc(ds, func(d wbv1.Diagnostic) bool { return d.Code == string(code) })
}

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/kstate"
)

func getRequest(t *testing.T, ns, name string) *wbv1.ConsentRequest {
	t.Helper()
	var cr wbv1.ConsentRequest
	eventually(t, 20*time.Second, "consent request "+name, func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cr)
		return err == nil, fmt.Sprint(err)
	})
	return &cr
}

var grant = envtest.ConsentGrant

// consentSetup makes a namespace with environment e placed on node-a (placedSetup) and
// returns it with a client acting as operator user, bound there.
func consentSetup(t *testing.T, user string) (string, client.Client) {
	t.Helper()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	return ns, operator(t, ns, user)
}

// operator returns a client acting as a fresh operator bound in ns.
func operator(t *testing.T, ns, user string) client.Client {
	t.Helper()
	return env.BoundAs(t, "workbench-operator", user, ns)
}

// TestAdmittedByProfile: an argv the profile admits is bound to the environment's node.
func TestAdmittedByProfile(t *testing.T) {
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	must(t, env.Client.Create(context.Background(), command(ns, "ok", "/usr/bin/git", "--no-pager", "status", "--short")))
	c := waitCommand(t, ns, "ok", "command admitted and bound to node-a", func(c *wbv1.TerminalCommand) bool {
		return isTrue(c.Status.Conditions, wbv1.ConditionAdmitted) && c.Labels[wbv1.NodeLabel] == "node-a"
	})
	if c.Status.AdmittedBy != "profile" || c.Status.Phase != wbv1.CommandPending || !strings.HasPrefix(string(c.Status.ArgvDigest), "sha256:") {
		t.Fatalf("unexpected status: %+v", c.Status)
	}
}

// TestConsentRememberExactArgv walks the whole consent path: held AwaitingConsent, the
// agent cannot grant, an operator grants with a stamped identity, the effective profile gains
// the entry, the command is admitted, and a second identical command is admitted directly.
func TestConsentRememberExactArgv(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	argv := []string{"/usr/bin/git", "--no-pager", "diff", "--stat"}
	c := askConsent(t, env.Client, ns, "diff", argv...)
	if c.Status.ConsentRequestRef != "diff-consent" {
		t.Fatalf("consentRequestRef = %q", c.Status.ConsentRequestRef)
	}
	cr := getRequest(t, ns, "diff-consent")
	if cr.Spec.Descriptor.ArgvDigest != c.Status.ArgvDigest || cr.Spec.Descriptor.SafetyCaps.Egress != "Deny" {
		t.Fatalf("descriptor does not bind the command: %+v", cr.Spec.Descriptor)
	}

	agent := env.BoundAs(t, "workbench-agent", "agent-1", ns)
	if err := agent.Create(ctx, grant(ns, "by-agent", "diff-consent", wbv1.ConsentRememberExactArgv)); !apierrors.IsForbidden(err) {
		t.Fatalf("an agent must not create grants; got %v", err)
	}

	op := operator(t, ns, "alice")
	g := grant(ns, "g1", "diff-consent", wbv1.ConsentRememberExactArgv)
	g.Spec.Operator = "mallory" // a client-set identity is overwritten
	must(t, op.Create(ctx, g))
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(g), g))
	if g.Spec.Operator != "alice" {
		t.Fatalf("operator not stamped from the request: %q", g.Spec.Operator)
	}
	waitCommandPhase(t, ns, "diff", wbv1.CommandPending)
	waitCommand(t, ns, "diff", "command admitted by consent", func(c *wbv1.TerminalCommand) bool {
		return c.Status.AdmittedBy == "g1" && isTrue(c.Status.Conditions, wbv1.ConditionAdmitted)
	})
	prof := getProfile(t, ns)
	if len(prof.Status.ConsentEntries) != 1 || prof.Status.ConsentEntries[0].Operator != "alice" || prof.Status.ConsentEntries[0].DeltaDigest == "" {
		t.Fatalf("effective profile lacks the grant's provenance: %+v", prof.Status)
	}
	if prof.Spec.MaxTimeoutSeconds != 120 {
		t.Fatalf("a grant changed the profile's caps: %+v", prof.Spec)
	}
	cr = getRequest(t, ns, "diff-consent")
	if cr.Status.Decision != wbv1.DecisionGranted || !strings.HasPrefix(cr.Status.ApprovalRef, "approval:consent:sha256:") {
		t.Fatalf("request status: %+v", cr.Status)
	}
	// The remembered argv admits the same command again without a prompt.
	must(t, env.Client.Create(ctx, command(ns, "diff-again", argv...)))
	waitAdmittedBy(t, ns, "diff-again", "g1") // by the remembered grant
	// A different argv is still not admitted: the grant is exact.
	askConsent(t, env.Client, ns, "diff-other", "/usr/bin/git", "--no-pager", "diff")

	// Revoking removes the entry from the effective profile with a diagnostic; a revoked
	// grant stays revoked. Status writes bump the resource version, so retry on conflict.
	setRevoked := func(v bool) error {
		return kstate.Update(op, ns, g.Name, g, func(g *wbv1.ConsentGrant) { g.Spec.Revoked = ptr(v) })
	}
	must(t, setRevoked(true))
	mustRefuse(t, setRevoked(false), "consent-revoked")
	waitProfile(t, ns, "revoked grant leaves the projection", func(p *wbv1.CommandProfile) bool {
		return len(p.Status.ConsentEntries) == 0 && hasDiag(p.Status.Diagnostics, "consent-revoked")
	})
}

// TestConsentAllowOnceAndDeny: allow-once admits exactly that command once; deny refuses.
func TestConsentAllowOnceAndDeny(t *testing.T) {
	ctx := context.Background()
	ns, op := consentSetup(t, "bob")
	askConsent(t, env.Client, ns, "once", "/usr/bin/git", "--no-pager", "log")
	must(t, op.Create(ctx, grant(ns, "g-once", "once-consent", wbv1.ConsentAllowOnce)))
	eventually(t, 20*time.Second, "allow-once admits and is consumed", func() (bool, string) {
		c, g := getCommand(t, ns, "once"), getGrant(t, ns, "g-once")
		return c.Status.AdmittedBy == "g-once" && g.Status.ConsumedBy == "once" && g.Status.State == wbv1.ConsentGrantConsumed, fmt.Sprintf("cmd=%+v grant=%+v", c.Status, g.Status)
	})
	// The same argv in another command is not admitted by the consumed grant.
	askConsent(t, env.Client, ns, "once-b", "/usr/bin/git", "--no-pager", "log")

	must(t, op.Create(ctx, grant(ns, "g-deny", "once-b-consent", wbv1.ConsentDeny)))
	c := waitCommandPhase(t, ns, "once-b", wbv1.CommandRefused)
	if c.Status.Refusal == nil || c.Status.Refusal.Code != "consent-denied" {
		t.Fatalf("refusal = %+v", c.Status.Refusal)
	}
	eventuallyKStatus(t, c, kstatus.FailedStatus)                                    // refused: not healthy
	eventuallyKStatus(t, getRequest(t, ns, "once-b-consent"), kstatus.CurrentStatus) // decided as asked
	// A decided request takes no further grant.
	mustRefuse(t, op.Create(ctx, grant(ns, "g-late", "once-b-consent", wbv1.ConsentAllowOnce)), "consent-scope-invalid")
}

// TestConsentPromptingForbidden: a profile that forbids prompting refuses with profile-missing.
func TestConsentPromptingForbidden(t *testing.T) {
	ns := namespace(t)
	placedSetup(t, ns, "node-a", func(s *wbv1.CommandProfileSpec) { s.ConsentPrompting = wbv1.ConsentPromptingForbidden })
	must(t, env.Client.Create(context.Background(), command(ns, "x", "/usr/bin/git", "--no-pager", "push")))
	c := waitCommandPhase(t, ns, "x", wbv1.CommandRefused)
	if c.Status.Refusal == nil || c.Status.Refusal.Code != "profile-missing" || c.Status.ConsentRequestRef != "" {
		t.Fatalf("status = %+v", c.Status)
	}
}

// TestConsentExpiresFailClosed: an unanswered request expires and the command is refused.
func TestConsentExpiresFailClosed(t *testing.T) {
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	askConsent(t, env.Client, ns, "late", "/usr/bin/git", "--no-pager", "blame")
	var c *wbv1.TerminalCommand
	eventually(t, (testConsentTimeout+20)*time.Second, "request expiry refuses the command", func() (bool, string) {
		c = getCommand(t, ns, "late")
		return c.Status.Phase == wbv1.CommandRefused, fmt.Sprintf("%+v", c.Status)
	})
	if c.Status.Refusal.Code != "consent-expired" {
		t.Fatalf("refusal = %+v", c.Status.Refusal)
	}
	cr := getRequest(t, ns, "late-consent")
	if cr.Status.Decision != wbv1.DecisionExpired {
		t.Fatalf("request decision = %s", cr.Status.Decision)
	}
	// Neither the expired request nor its refused command is healthy (issue 16 item 9).
	eventuallyKStatus(t, cr, kstatus.FailedStatus)
	eventuallyKStatus(t, c, kstatus.FailedStatus)
}

// TestConsentOperatorBindingInactive: a grant whose operator loses the approve right stops
// being effective, with the diagnostic consent-operator-binding-inactive.
func TestConsentOperatorBindingInactive(t *testing.T) {
	ctx := context.Background()
	ns, op := consentSetup(t, "carol")
	askConsent(t, env.Client, ns, "c1", "/usr/bin/git", "--no-pager", "show")
	must(t, op.Create(ctx, grant(ns, "g", "c1-consent", wbv1.ConsentRememberExactArgv)))
	waitGrant(t, ns, "g", "grant active", func(g *wbv1.ConsentGrant) bool { return g.Status.State == wbv1.ConsentGrantActive })
	must(t, env.Client.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "workbench-operator-carol", Namespace: ns}}))
	waitGrant(t, ns, "g", "grant inactive after the operator lost the role", func(g *wbv1.ConsentGrant) bool {
		return g.Status.State == wbv1.ConsentGrantUnbound && hasDiag(g.Status.Diagnostics, "consent-operator-binding-inactive")
	})
	waitProfile(t, ns, "projection drops the grant", func(p *wbv1.CommandProfile) bool {
		return len(p.Status.ConsentEntries) == 0 && hasDiag(p.Status.Diagnostics, "consent-operator-binding-inactive")
	})
}

// TestConsentGrantRefusals: who may grant, and what a grant may say.
func TestConsentGrantRefusals(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	askConsent(t, env.Client, ns, "p", "/usr/bin/git", "--no-pager", "log", "--oneline")
	op := operator(t, ns, "dave")
	// A viewer is no operator.
	viewer := env.BoundAs(t, "workbench-viewer", "vic", ns)
	if err := viewer.Create(ctx, grant(ns, "gv", "p-consent", wbv1.ConsentAllowOnce)); !apierrors.IsForbidden(err) {
		t.Fatalf("viewer grant: %v", err)
	}
	// A prefix longer than the reviewed argv, and a prefix wide open to inline code.
	g := grant(ns, "g-long", "p-consent", wbv1.ConsentRememberArgvPrefix)
	g.Spec.PrefixLength = ptr(int32(9))
	mustRefuse(t, op.Create(ctx, g), "consent-scope-invalid")
	g = grant(ns, "g-exp", "p-consent", wbv1.ConsentRememberExactArgv)
	g.Spec.ExpiresAt = &metav1.Time{Time: time.Now().Add(365 * 24 * time.Hour)}
	mustRefuse(t, op.Create(ctx, g), "consent-scope-invalid")
	g = grant(ns, "g-missing", "nope", wbv1.ConsentAllowOnce)
	mustRefuse(t, op.Create(ctx, g), "consent-scope-invalid: the consent request does not exist")
	// A valid bounded prefix grant admits a later command under the prefix.
	g = grant(ns, "g-prefix", "p-consent", wbv1.ConsentRememberArgvPrefix)
	g.Spec.PrefixLength = ptr(int32(3))
	g.Spec.VariablePrefixes = []string{"--oneline", "-n"}
	must(t, op.Create(ctx, g))
	must(t, env.Client.Create(ctx, command(ns, "p2", "/usr/bin/git", "--no-pager", "log", "-n5")))
	waitAdmittedBy(t, ns, "p2", "g-prefix") // the prefix grant admits a later command
}

func hasDiag(ds []wbv1.Diagnostic, code string) bool {
	for _, d := range ds {
		if d.Code == code {
			return true
		}
	}
	return false
}

func isTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/testkit"
)

// gateFixture is a namespace with a git profile (admitting `status`), an Environment
// placed on node under the test operational context, and a session s on it.
type gateFixture struct {
	ns, node string
	prof     *wbv1.CommandProfile
	env      *wbv1.Environment
	sess     *wbv1.TerminalSession
	clock    *fixedClock
}

func newGateFixture(t *testing.T, node string) *gateFixture {
	t.Helper()
	ctx := context.Background()
	f := &gateFixture{ns: env.Namespace(t, "ctl-gate-"), node: node, clock: newClock()}
	if err := env.Client.Create(ctx, envtest.HostLocalCapability(node)); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating capability: %v", err)
	}
	f.prof = &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: f.ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/usr/bin/git", FixedArgs: []string{"--no-pager"}, AllowedArgPrefixes: []string{"status"},
		AllowedRoots: []string{"repo"}, MaxTimeoutSeconds: 120, MaxOutputBytes: 1 << 20,
	}}
	testkit.Must(t, env.Client.Create(ctx, f.prof))
	f.env = &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: f.ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: testkit.Ptr("/srv/work/" + f.ns)}},
	}}
	testkit.Must(t, env.Client.Create(ctx, f.env))
	// The environment controller does not run here: the test places the environment.
	f.env.Status.Phase, f.env.Status.NodeName, f.env.Status.EffectiveOperationalContext = wbv1.EnvironmentReady, node, "test"
	testkit.Must(t, env.Client.Status().Update(ctx, f.env))
	f.sess = &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: f.ns}, Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e"}}
	testkit.Must(t, env.Client.Create(ctx, f.sess))
	synced(t, f.prof, f.env, f.sess)
	return f
}

func (f *gateFixture) reconciler(t *testing.T, cd *actuation.DenyCooldown) *TerminalCommandReconciler {
	if cd == nil {
		cd = actuation.NewDenyCooldown()
	}
	return &TerminalCommandReconciler{ConsentGate{Client: cachedClient(t), Recorder: recorder(t, "test-command"), Now: f.clock.Now, Cooldown: cd}}
}

// command creates a command on session s with argv, as the admin client (the webhook stamps
// spec.createdBy "admin").
func (f *gateFixture) command(t *testing.T, name string, argv ...string) *wbv1.TerminalCommand {
	t.Helper()
	c := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "git", Argv: argv, Cwd: wbv1.CwdAddress{Root: "repo"}}}
	testkit.Must(t, env.Client.Create(context.Background(), c))
	synced(t, c)
	return c
}

func get[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	testkit.Must(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
	return obj
}

func hasManager(obj client.Object, prefix string) bool {
	for _, m := range statusManagers(obj) {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}

// TestGateAsksConsentThenAllowOnceAdmits: a command whose argv the profile does not admit
// is held AwaitingConsent with a ConsentRequest that binds its UID, argv digest and
// environment; an operator's allow-once grant decides the request, is Active, reaches the effective
// profile bound to that command, and the next gate pass admits the command, binds it to the
// environment's node and consumes the grant for that command object only.
func TestGateAsksConsentThenAllowOnceAdmits(t *testing.T) {
	ctx := context.Background()
	f := newGateFixture(t, "node-gate-a")
	r := f.reconciler(t, nil)
	cmd := f.command(t, "diff", "/usr/bin/git", "--no-pager", "diff")
	reconcileOnce(t, r, cmd)

	got := get(t, &wbv1.TerminalCommand{ObjectMeta: cmd.ObjectMeta})
	if got.Status.Phase != wbv1.CommandAwaitingConsent || got.Status.ConsentRequestRef != "diff-consent" || isTrueCond(got.Status.Conditions, wbv1.ConditionAdmitted) {
		t.Fatalf("a command the profile does not admit: phase %s, request %q, conditions %+v", got.Status.Phase, got.Status.ConsentRequestRef, got.Status.Conditions)
	}
	cr := get(t, &wbv1.ConsentRequest{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "diff-consent"}})
	d := cr.Spec.Descriptor
	if d.CommandUID != got.UID || d.ArgvDigest != got.Status.ArgvDigest || d.EnvironmentUID != f.env.UID || d.OperationalContext != "test" ||
		d.ReasonCode != string(actuation.CodeConsentRequired) || d.Requester != "admin" {
		t.Fatalf("the consent request does not bind the command: %+v", d)
	}
	// A second pass asks nothing new: the same request, no second one.
	synced(t, got, cr)
	reconcileOnce(t, r, got)
	var crs wbv1.ConsentRequestList
	testkit.Must(t, env.Client.List(ctx, &crs, client.InNamespace(f.ns)))
	if len(crs.Items) != 1 {
		t.Fatalf("a second gate pass asked again: %d consent requests", len(crs.Items))
	}

	// An operator (the admin client: system:masters may approve) grants allow-once.
	g := &wbv1.ConsentGrant{ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: f.ns},
		Spec: wbv1.ConsentGrantSpec{RequestRef: "diff-consent", Scope: wbv1.ConsentAllowOnce}}
	testkit.Must(t, env.Client.Create(ctx, g))
	synced(t, g)
	reqR := &ConsentRequestReconciler{Client: cachedClient(t), Recorder: recorder(t, "test-consent"), Now: f.clock.Now, Cooldown: actuation.NewDenyCooldown()}
	reconcileOnce(t, reqR, cr)
	cr = get(t, cr)
	if cr.Status.Decision != wbv1.DecisionGranted || cr.Status.GrantRef != "once" {
		t.Fatalf("request after the grant: %+v", cr.Status)
	}
	reconcileOnce(t, &ConsentGrantReconciler{Client: cachedClient(t), Recorder: recorder(t, "test-consent"), Now: f.clock.Now}, g)
	if g = get(t, g); g.Status.State != wbv1.ConsentGrantActive {
		t.Fatalf("grant of an operator who may approve: %+v", g.Status)
	}
	synced(t, g)
	reconcileOnce(t, &CommandProfileReconciler{Client: cachedClient(t)}, f.prof)
	prof := get(t, &wbv1.CommandProfile{ObjectMeta: f.prof.ObjectMeta})
	if len(prof.Status.ConsentEntries) != 1 {
		t.Fatalf("the allow-once grant did not reach the effective profile: %+v", prof.Status.ConsentEntries)
	}
	synced(t, cr, prof)
	got = get(t, got)
	reconcileOnce(t, r, got)
	got = get(t, got)
	if !isTrueCond(got.Status.Conditions, wbv1.ConditionAdmitted) || got.Status.AdmittedBy != "once" || got.Labels[wbv1.NodeLabel] != f.node ||
		got.Status.Phase != wbv1.CommandPending {
		t.Fatalf("granted command: phase %s admittedBy %q labels %v conditions %+v", got.Status.Phase, got.Status.AdmittedBy, got.Labels, got.Status.Conditions)
	}
	g = get(t, g)
	if g.Status.ConsumedByUID != got.UID || g.Status.ConsumedBy != "diff" {
		t.Fatalf("the allow-once grant was not consumed by the command it admitted: %+v", g.Status)
	}
	if m := statusManagers(got); len(m) != 1 || m[0] != FieldManagerPrefix+"terminalcommand" {
		t.Fatalf("status field managers of a command the manager decided: %v", m)
	}
}

// TestGateWritesNothingOfANodeDecidedCommand: a command bound at create to a node whose
// agent is registered (WorkbenchNode status.agentVersion) is that node's to decide: the
// manager's Reconcile writes no field of it, not its phase, not Admitted, not even when the
// profile would admit it or when it needs consent (issue 26: one writer per decision).
func TestGateWritesNothingOfANodeDecidedCommand(t *testing.T) {
	ctx := context.Background()
	f := newGateFixture(t, "node-gate-agent")
	wn := &wbv1.WorkbenchNode{ObjectMeta: metav1.ObjectMeta{Name: f.node}}
	if err := env.Client.Create(ctx, wn); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating WorkbenchNode: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), wn) })
	wn = get(t, wn)
	wn.Status.AgentVersion = "test-agent"
	testkit.Must(t, env.Client.Status().Update(ctx, wn))
	synced(t, wn)
	r := f.reconciler(t, nil)
	for _, c := range []*wbv1.TerminalCommand{
		f.command(t, "admissible", "/usr/bin/git", "--no-pager", "status"),
		f.command(t, "needs-consent", "/usr/bin/git", "--no-pager", "diff"),
	} {
		if c.Labels[wbv1.NodeLabel] != f.node {
			t.Fatalf("the binding webhook did not bind %s to %s: labels %v", c.Name, f.node, c.Labels)
		}
		reconcileOnce(t, r, c)
		got := get(t, &wbv1.TerminalCommand{ObjectMeta: c.ObjectMeta})
		if got.ResourceVersion != c.ResourceVersion || hasManager(got, FieldManagerPrefix) || got.Status.Phase != "" {
			t.Fatalf("the manager wrote a node-decided command %s: rv %s -> %s, managers %v, status %+v",
				c.Name, c.ResourceVersion, got.ResourceVersion, statusManagers(got), got.Status)
		}
	}
	var crs wbv1.ConsentRequestList
	testkit.Must(t, env.Client.List(ctx, &crs, client.InNamespace(f.ns)))
	if len(crs.Items) != 0 {
		t.Fatalf("the manager asked consent for a command the node decides: %d requests", len(crs.Items))
	}
}

// TestGateDeniedArgvCoolsDown: after an operator denies an argv, the command is refused
// consent-denied, and the same identity's next command with that argv is refused
// consent-cooldown without asking an operator again; another identity is still asked.
func TestGateDeniedArgvCoolsDown(t *testing.T) {
	ctx := context.Background()
	f := newGateFixture(t, "node-gate-b")
	cd := actuation.NewDenyCooldown()
	r := f.reconciler(t, cd)
	reqR := &ConsentRequestReconciler{Client: cachedClient(t), Recorder: recorder(t, "test-consent"), Now: f.clock.Now, Cooldown: cd}
	argv := []string{"/usr/bin/git", "--no-pager", "push"}
	first := f.command(t, "push-1", argv...)
	reconcileOnce(t, r, first)
	cr := get(t, &wbv1.ConsentRequest{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "push-1-consent"}})
	deny := &wbv1.ConsentGrant{ObjectMeta: metav1.ObjectMeta{Name: "no", Namespace: f.ns}, Spec: wbv1.ConsentGrantSpec{RequestRef: "push-1-consent", Scope: wbv1.ConsentDeny}}
	testkit.Must(t, env.Client.Create(ctx, deny))
	synced(t, deny)
	reconcileOnce(t, reqR, cr)
	cr = get(t, cr)
	if cr.Status.Decision != wbv1.DecisionDenied {
		t.Fatalf("request after a deny: %+v", cr.Status)
	}
	synced(t, cr)
	reconcileOnce(t, r, first)
	got := get(t, &wbv1.TerminalCommand{ObjectMeta: first.ObjectMeta})
	if got.Status.Refusal == nil || got.Status.Refusal.Code != string(actuation.CodeConsentDenied) || got.Status.Phase != wbv1.CommandRefused {
		t.Fatalf("a denied command: phase %s refusal %+v", got.Status.Phase, got.Status.Refusal)
	}

	again := f.command(t, "push-2", argv...)
	reconcileOnce(t, r, again)
	got = get(t, &wbv1.TerminalCommand{ObjectMeta: again.ObjectMeta})
	if got.Status.Refusal == nil || got.Status.Refusal.Code != string(actuation.CodeConsentCooldown) {
		t.Fatalf("the same identity's same argv right after a deny: phase %s refusal %+v", got.Status.Phase, got.Status.Refusal)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "push-2-consent"}, &wbv1.ConsentRequest{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a cooling-down argv asked an operator again: %v", err)
	}

	testkit.Must(t, env.Bind(ctx, "workbench-agent", "agent-8", f.ns))
	agent, err := env.As("agent-8")
	testkit.Must(t, err)
	other := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: "push-3", Namespace: f.ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "git", Argv: argv, Cwd: wbv1.CwdAddress{Root: "repo"}}}
	testkit.Must(t, agent.Create(ctx, other))
	synced(t, other)
	reconcileOnce(t, r, other)
	if got = get(t, other); got.Status.Phase != wbv1.CommandAwaitingConsent {
		t.Fatalf("another identity's command is held by someone else's deny: phase %s refusal %+v", got.Status.Phase, got.Status.Refusal)
	}
}

// TestGateRefusesWithoutPrompting: a profile that forbids prompting refuses an argv it does
// not admit (profile-missing) instead of asking; a missing session past the grace is
// refused session-missing; a command cancelled before admission completes Cancelled and is
// never admitted.
func TestGateRefusesWithoutPrompting(t *testing.T) {
	ctx := context.Background()
	f := newGateFixture(t, "node-gate-c")
	r := f.reconciler(t, nil)
	f.prof = get(t, f.prof)
	f.prof.Spec.ConsentPrompting = wbv1.ConsentPromptingForbidden
	testkit.Must(t, env.Client.Update(ctx, f.prof))
	synced(t, f.prof)
	c := f.command(t, "diff", "/usr/bin/git", "--no-pager", "diff")
	reconcileOnce(t, r, c)
	got := get(t, &wbv1.TerminalCommand{ObjectMeta: c.ObjectMeta})
	if got.Status.Refusal == nil || got.Status.Refusal.Code != string(actuation.CodeProfileMissing) || got.Status.ConsentRequestRef != "" {
		t.Fatalf("prompting forbidden: phase %s refusal %+v request %q", got.Status.Phase, got.Status.Refusal, got.Status.ConsentRequestRef)
	}

	orphan := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Namespace: f.ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "nope", ProfileRef: "git", Argv: []string{"/usr/bin/git", "--no-pager", "status"}, Cwd: wbv1.CwdAddress{Root: "repo"}}}
	testkit.Must(t, env.Client.Create(ctx, orphan))
	synced(t, orphan)
	reconcileOnce(t, r, orphan)
	if got = get(t, orphan); got.Status.Phase != wbv1.CommandPending || got.Status.Refusal != nil {
		t.Fatalf("a young command naming a missing session is held, not refused: phase %s refusal %+v", got.Status.Phase, got.Status.Refusal)
	}
	f.clock.Advance(ReferenceGrace + time.Minute) // (the clock was read before the command was created)
	synced(t, got)
	reconcileOnce(t, r, got)
	if got = get(t, got); got.Status.Refusal == nil || got.Status.Refusal.Code != string(actuation.CodeSessionMissing) {
		t.Fatalf("past the grace: phase %s refusal %+v", got.Status.Phase, got.Status.Refusal)
	}

	cancelled := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: "cancelled", Namespace: f.ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "git", Argv: []string{"/usr/bin/git", "--no-pager", "status"}, Cwd: wbv1.CwdAddress{Root: "repo"},
			DesiredState: wbv1.CommandDesiredCancelled}}
	testkit.Must(t, env.Client.Create(ctx, cancelled))
	synced(t, cancelled)
	reconcileOnce(t, r, cancelled)
	if got = get(t, cancelled); isTrueCond(got.Status.Conditions, wbv1.ConditionAdmitted) || !wbv1.CommandIsFinal(got.Status.Conditions) {
		t.Fatalf("a command cancelled before admission: phase %s conditions %+v", got.Status.Phase, got.Status.Conditions)
	}
}

// TestGateIdempotencyKeyNamesOneIntent: a later command with the same idempotency key and
// another spec is refused idempotency-conflict; one with the same spec is admitted (its
// node replays the owner's outcome). The owner is read through the cache's idempotency-key
// index, as in the manager.
func TestGateIdempotencyKeyNamesOneIntent(t *testing.T) {
	ctx := context.Background()
	f := newGateFixture(t, "node-gate-idem")
	r := f.reconciler(t, nil)
	keyed := func(name string, argv ...string) *wbv1.TerminalCommand {
		t.Helper()
		c := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: wbv1.TerminalCommandSpec{
			SessionRef: "s", ProfileRef: "git", Argv: argv, Cwd: wbv1.CwdAddress{Root: "repo"}, IdempotencyKey: "k-1"}}
		testkit.Must(t, env.Client.Create(ctx, c))
		synced(t, c)
		return c
	}
	owner := keyed("a-owner", "/usr/bin/git", "--no-pager", "status")
	same := keyed("b-same", "/usr/bin/git", "--no-pager", "status")
	other := keyed("c-other", "/usr/bin/git", "--no-pager", "status", "--short")
	for _, c := range []*wbv1.TerminalCommand{owner, same, other} {
		reconcileOnce(t, r, c)
	}
	for _, c := range []*wbv1.TerminalCommand{owner, same} {
		if got := get(t, c); !isTrueCond(got.Status.Conditions, wbv1.ConditionAdmitted) {
			t.Fatalf("%s (the key's intent): phase %s refusal %+v", c.Name, got.Status.Phase, got.Status.Refusal)
		}
	}
	if got := get(t, other); got.Status.Refusal == nil || got.Status.Refusal.Code != string(actuation.CodeIdempotencyConflict) {
		t.Fatalf("another spec under the same key: phase %s refusal %+v", got.Status.Phase, got.Status.Refusal)
	}
}

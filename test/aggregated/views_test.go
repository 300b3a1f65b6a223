package aggregated

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	dpprotocol "sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/webhooks"
)

// The story fixture (seed 003): a manifest test that fails because the generator emits
// paths in directory iteration order (dirorder.txt records the order the directory
// returned them) instead of canonical lexical order.
var storyFixture = map[string]string{
	"inputs/alpha.txt": "a\n",
	"inputs/mid.txt":   "m\n",
	"inputs/zeta.txt":  "z\n",
	// dirorder.txt records the order the directory iteration returned the inputs.
	"dirorder.txt":    "zeta.txt\nalpha.txt\nmid.txt\n",
	"golden.manifest": "alpha.txt a\nmid.txt m\nzeta.txt z\n",
	// manifest.py emits the manifest in the order it is given the paths.
	"manifest.py": "def order(paths):\n    return list(paths)\n",
	// runner.py is the chair's terminal program: each "run" line runs the manifest test.
	"runner.py": `import runpy, sys
while True:
    sys.stdout.write("manifest-test> ")
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        break
    if line.strip() != "run":
        continue
    order = runpy.run_path("manifest.py")["order"]
    paths = open("dirorder.txt").read().split()
    got = "".join(p + " " + open("inputs/" + p).read() for p in order(paths))
    want = open("golden.manifest").read()
    print("MANIFEST TEST: PASS" if got == want else "MANIFEST TEST: FAIL (order differs)")
`,
}

// The fix B proposes: canonical lexical ordering before the manifest is emitted.
const fixedManifest = "def order(paths):\n    return sorted(paths)\n"

// shellSession is a PTY session running the fixture's runner with operator-only raw input.
func shellSession(ns, name string) *wbv1.TerminalSession {
	return &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.TerminalSessionSpec{
		EnvironmentRef: "e", ShellProfileRef: ptr(wbv1.ObjectName("runner")), RawInput: wbv1.RawInputOperatorOnly, Rows: 24, Cols: 80}}
}

// viewEnvironment creates a host-local environment on node over a fresh directory with
// operational context class, a /bin/sh PTY profile and the given sessions, and waits until
// they run.
func viewEnvironment(t testing.TB, ns, node, base string, class wbv1.ContextClass, sessions ...string) string {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp(base, "v-")
	must(t, err)
	must(t, os.Chmod(dir, 0o777))
	must(t, env.Client.Create(ctx, profile(ns, "runner", "/usr/bin/python3", func(s *wbv1.CommandProfileSpec) {
		s.PTY, s.AllowedArgPrefixes, s.FixedArgs = "Allowed", nil, []string{"-u", "runner.py"}
	})))
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(dir)}},
		NodeSelector:       map[string]string{wbv1.NodeLabel: node},
		OperationalContext: &wbv1.OperationalContext{Class: class},
	}}))
	for _, s := range sessions {
		must(t, env.Client.Create(ctx, shellSession(ns, s)))
	}
	for _, s := range sessions {
		waitSessionRunning(t, ns, s)
	}
	return dir
}

func waitSessionRunning(t testing.TB, ns, name string) {
	t.Helper()
	kstate.Until(t, env.Client, 60*time.Second, "session "+name+" Running", ns, name, &wbv1.TerminalSession{},
		func(got *wbv1.TerminalSession) bool {
			return got.Status.Phase == wbv1.SessionRunning && got.Labels[wbv1.NodeLabel] != ""
		})
}

// terminalView is a view of session with ceiling.
func terminalView(ns, name, session string, ceiling wbv1.ContextClass) *wbv1.TerminalView {
	return &wbv1.TerminalView{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.TerminalViewSpec{
		SessionRef: wbv1.ObjectName(session), ClassificationCeiling: ceiling, FreshnessSeconds: ptr(int32(2))}}
}

// chairTerminal is the chair's attach (stdin) to a session through kube-apiserver.
type chairTerminal struct {
	in     *io.PipeWriter
	out    syncBuffer
	cancel context.CancelFunc
	errc   chan error
}

func attachChair(t testing.TB, cfg *rest.Config, ns, session string) *chairTerminal {
	t.Helper()
	inR, inW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	c := &chairTerminal{in: inW, cancel: cancel, errc: make(chan error, 1)}
	go func() {
		c.errc <- stream(ctx, cfg, subPath(ns, "terminalsessions", session, "attach")+"?stdin=true&stdout=true&tty=true",
			remotecommand.StreamOptions{Stdin: inR, Stdout: &c.out, Tty: true})
	}()
	t.Cleanup(func() { cancel(); _ = inW.Close() })
	return c
}

// run types a command line into the chair's shell and waits for want in its output.
func (c *chairTerminal) run(t testing.TB, line, want string) {
	t.Helper()
	_, err := fmt.Fprintf(c.in, "%s\n", line)
	must(t, err)
	if !waitFor(&c.out, want, 20*time.Second) {
		t.Fatalf("the chair's terminal did not show %q after %q; output %q", want, line, c.out.String())
	}
}

// TestSharedChairTerminalStory is seed 003 end to end through kube-apiserver,
// workbench-apiserver and a real node agent process: the chair runs a failing manifest
// test; participants B and C, each with their own identity, membership and grant, observe
// the failing screen; B proposes the fix as a FilePatch (inert until the operator
// approves); C's grant is revoked; the operator approves and re-runs the test; B observes
// the passing screen while C received nothing after its revocation; the node agent is
// killed with SIGKILL and restarted; B resumes with a fresh frame, C stays refused; the
// environment's context is raised and B's old view is superseded until a new view and
// grant admit it.
func TestSharedChairTerminalStory(t *testing.T) {
	ctx := context.Background()
	const node = "node-views"
	bin := buildAgent(t)
	base, err := os.MkdirTemp(workspace, "views-")
	must(t, err)
	kubeconfig, config := agentSetup(t, node, base)
	agent := startAgentProc(t, bin, kubeconfig, config)
	ep := waitDataPlane(t, node, "")

	ns := namespace(t)
	dir := viewEnvironment(t, ns, node, base, "test")
	writeFixture(t, dir)
	must(t, env.Client.Create(ctx, shellSession(ns, "chair")))
	waitSessionRunning(t, ns, "chair")

	// The chair: the node operator, the only terminal actuator.
	chairCfg := user(t, ns, "chair", "workbench-operator")
	chair, err := env.As("chair")
	must(t, err)
	term := attachChair(t, chairCfg, ns, "chair")
	term.run(t, "run", "MANIFEST TEST: FAIL")

	// Publication: the visible screen only, bound to this environment's generation and context.
	must(t, chair.Create(ctx, terminalView(ns, "chair-view", "chair", "test")))
	var view wbv1.TerminalView
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "chair-view"}, &view))
	if b := view.Spec.Binding; b == nil || b.OperationalContext != "test" || b.SourceGeneration == 0 || view.Labels[wbv1.NodeLabel] != node {
		t.Fatalf("the view's binding was not stamped: %+v labels %v", view.Spec.Binding, view.Labels)
	}

	// Participants B (a ServiceAccount) and C (a user): membership (RBAC) for both...
	bCfg, bUser := observerSA(t, ns, "bee")
	cCfg := observerUser(t, ns, "carol")
	// ...but membership alone shows nothing.
	if code, reason := viewStatusOf(t, bCfg, ns, "chair-view"); code != http.StatusForbidden || reason != string(actuation.CodeViewGrantMissing) {
		t.Fatalf("B without a grant: %d %q, want 403 %s", code, reason, actuation.CodeViewGrantMissing)
	}
	gb := grant(t, chair, ns, "bee", "chair-view", wbv1.ViewSubject{Kind: wbv1.ViewSubjectServiceAccount, Name: "bee", Namespace: ns}, time.Hour)
	grant(t, chair, ns, "carol", "chair-view", wbv1.ViewSubject{Kind: wbv1.ViewSubjectUser, Name: "carol"}, time.Hour)
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(gb), gb))
	if gb.Spec.GrantedBy != "chair" || gb.Spec.ViewUID != view.UID {
		t.Fatalf("grant not stamped with the granter and view: grantedBy %q viewUID %q", gb.Spec.GrantedBy, gb.Spec.ViewUID)
	}

	eventually(t, 30*time.Second, "the view's status says Publishing with its binding", func() (bool, string) {
		var v wbv1.TerminalView
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "chair-view"}, &v))
		return v.Status.Phase == wbv1.ViewPublishing && v.Status.OperationalContext == "test" &&
			v.Status.EnvironmentGeneration == view.Spec.Binding.SourceGeneration && kstatusOf(t, &v) == "Current", fmt.Sprintf("%s %+v", kstatusOf(t, &v), v.Status)
	})
	b := watchView(t, bCfg, ns, "chair-view")
	c := watchView(t, cCfg, ns, "chair-view")
	fb := b.waitScreen("B observes the failing test", "MANIFEST TEST: FAIL", 30*time.Second)
	c.waitScreen("C observes the failing test", "MANIFEST TEST: FAIL", 30*time.Second)
	if fb.OperationalContext != "test" || fb.EnvironmentGeneration != view.Spec.Binding.SourceGeneration || !strings.HasPrefix(fb.Digest, "sha256:") || fb.Seq == 0 {
		t.Fatalf("a frame must carry sequence, digest, operational context and generation: %+v", fb.ViewFrame)
	}

	// B proposes the fix as a FilePatch: inert until the operator approves.
	bRole := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "patch-proposer", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{wbv1.GroupVersion.Group}, Resources: []string{"filepatches"}, Verbs: []string{"create", "get"}}}}
	must(t, env.Client.Create(ctx, bRole))
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bee-proposer", Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "bee", Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "patch-proposer"}}))
	bClient, err := client.New(bCfg, client.Options{Scheme: env.Scheme})
	must(t, err)
	fp := &wbv1.FilePatch{ObjectMeta: metav1.ObjectMeta{Name: "canonical-order", Namespace: ns}, Spec: wbv1.FilePatchSpec{
		EnvironmentRef: "e", Root: "repo", Format: wbv1.PatchFormatStructured,
		Operations: []wbv1.FileOperation{{Op: "replace", Path: "manifest.py", Content: ptr(fixedManifest)}}}}
	d, err := webhooks.PatchDigest(&fp.Spec)
	must(t, err)
	fp.Spec.Digest = wbv1.Digest(d)
	eventually(t, 10*time.Second, "B may propose patches", func() (bool, string) {
		err := bClient.Create(ctx, fp.DeepCopy())
		return err == nil, fmt.Sprint(err)
	})
	waitPatchPhase(t, fp, "AwaitingApproval")
	if raw, _ := os.ReadFile(filepath.Join(dir, "manifest.py")); string(raw) != storyFixture["manifest.py"] {
		t.Fatalf("an unapproved patch changed the workspace: %q", raw)
	}

	// C's grant is revoked before the repair exists; C's stream closes with the code.
	revokedAt := revoke(t, chair, ns, "carol")
	if code := c.waitFinal("C's stream closes", 5*time.Second); code != string(actuation.CodeViewGrantRevoked) {
		t.Fatalf("C's stream ended with %q, want %s", code, actuation.CodeViewGrantRevoked)
	}
	cFrames, _, _ := c.snapshot()
	closedAt := cFrames[len(cFrames)-1].At
	t.Logf("C: revocation stored -> stream closed in %s", closedAt.Sub(revokedAt))

	// The operator approves; the chair re-runs the test.
	must(t, kstate.Update(chair, fp.Namespace, fp.Name, &wbv1.FilePatch{}, func(got *wbv1.FilePatch) { got.Spec.Approval = "Approved" }))
	waitPatchPhase(t, fp, "Applied")
	term.run(t, "run", "MANIFEST TEST: PASS")
	b.waitScreen("B observes the passing test", "MANIFEST TEST: PASS", 30*time.Second)

	// C received nothing after its revocation, frame by frame; it never saw the repair.
	cFrames, _, _ = c.snapshot()
	for i, f := range cFrames {
		if f.Type != "closed" && f.At.After(revokedAt) {
			t.Errorf("C frame %d (%s) arrived %s after the revocation", i, f.Type, f.At.Sub(revokedAt))
		}
		if strings.Contains(strings.Join(f.Lines, "\n"), "PASS") {
			t.Errorf("C frame %d shows the repaired state", i)
		}
	}
	if last := cFrames[len(cFrames)-1]; last.Type != "closed" {
		t.Errorf("C's last line is %q, not closed", last.Type)
	}
	if code, reason := viewStatusOf(t, cCfg, ns, "chair-view"); code != http.StatusForbidden || reason != string(actuation.CodeViewGrantRevoked) {
		t.Fatalf("C after revocation: %d %q", code, reason)
	}
	// B's frames are latest-state: within a connection, every frame has a new digest.
	bFrames, _, _ := b.snapshot()
	checkCoalesced(t, "B", bFrames)

	// Dirty restart of the chair's node agent: SIGKILL, then a new process.
	bBefore := len(bFrames)
	agent.kill(t)
	startAgentProc(t, bin, kubeconfig, config)
	waitDataPlane(t, node, ep)
	kstate.Until(t, env.Client, 60*time.Second, "the swept session is final", ns, "chair", &wbv1.TerminalSession{},
		func(s *wbv1.TerminalSession) bool { return wbv1.SessionPhaseIsFinal(s.Status.Phase) })
	// The chair opens a new terminal in the same environment and re-points the view to it:
	// the binding (environment, generation, context) and so B's grant still hold.
	must(t, env.Client.Create(ctx, shellSession(ns, "chair2")))
	waitSessionRunning(t, ns, "chair2")
	must(t, kstate.Update(chair, ns, "chair-view", &wbv1.TerminalView{}, func(v *wbv1.TerminalView) { v.Spec.SessionRef = "chair2" }))
	term2 := attachChair(t, chairCfg, ns, "chair2")
	term2.run(t, "run", "MANIFEST TEST: PASS")
	fresh := b.waitScreenFrom(bBefore, "B resumes with a fresh frame", "MANIFEST TEST: PASS", 60*time.Second)
	if fresh.Conn <= bFrames[bBefore-1].Conn {
		t.Fatalf("B's frame after the restart came on connection %d, not a new one", fresh.Conn)
	}
	if code, reason := viewStatusOf(t, cCfg, ns, "chair-view"); code != http.StatusForbidden || reason != string(actuation.CodeViewGrantRevoked) {
		t.Fatalf("C after the restart: %d %q; a stale grant must never revive", code, reason)
	}
	var gc wbv1.ViewGrant
	eventually(t, 30*time.Second, "C's grant status says revoked", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "carol"}, &gc))
		// Revoked as its spec asked: kstatus reads Current (where the spec wants it).
		return gc.Status.State == wbv1.ViewGrantInactive && gc.Status.Reason == string(actuation.CodeViewGrantRevoked) && kstatusOf(t, &gc) == "Current",
			fmt.Sprintf("%s %+v", kstatusOf(t, &gc), gc.Status)
	})
	_ = bUser

	// Context replacement: the environment's context is raised to production. B's view,
	// bound to test, is superseded; a new view and a new grant admit B again.
	must(t, kstate.Update(env.Client, ns, "e", &wbv1.Environment{}, func(e *wbv1.Environment) {
		e.Spec.OperationalContext = &wbv1.OperationalContext{Class: "production"}
	}))
	if code := b.waitFinal("B's old view is superseded", 10*time.Second); code != string(actuation.CodeViewContextSuperseded) {
		t.Fatalf("B's stream ended with %q, want %s", code, actuation.CodeViewContextSuperseded)
	}
	if code, reason := viewStatusOf(t, bCfg, ns, "chair-view"); code != http.StatusConflict || reason != string(actuation.CodeViewContextSuperseded) {
		t.Fatalf("B on the superseded view: %d %q", code, reason)
	}
	eventually(t, 30*time.Second, "the old view's status says Superseded", func() (bool, string) {
		var v wbv1.TerminalView
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "chair-view"}, &v))
		// A superseded view serves nobody: kstatus reads Failed, never Current.
		return v.Status.Phase == wbv1.ViewSuperseded && v.Status.Refusal != nil && v.Status.Refusal.Code == string(actuation.CodeViewContextSuperseded) &&
			kstatusOf(t, &v) == "Failed", fmt.Sprintf("%s %+v", kstatusOf(t, &v), v.Status)
	})
	if err := chair.Create(ctx, terminalView(ns, "chair-view-prod", "chair2", "test")); err == nil || !strings.Contains(err.Error(), string(actuation.CodeViewClassificationExceeded)) {
		t.Fatalf("a view whose ceiling is below the new context was admitted: %v", err)
	}
	must(t, chair.Create(ctx, terminalView(ns, "chair-view-prod", "chair2", "production")))
	b2 := watchView(t, bCfg, ns, "chair-view-prod")
	eventually(t, 10*time.Second, "B refused on the new view until granted", func() (bool, string) {
		_, final, last := b2.snapshot()
		return final == string(actuation.CodeViewGrantMissing), last
	})
	grant(t, chair, ns, "bee-prod", "chair-view-prod", wbv1.ViewSubject{Kind: wbv1.ViewSubjectServiceAccount, Name: "bee", Namespace: ns}, time.Hour)
	b3 := watchView(t, bCfg, ns, "chair-view-prod")
	f := b3.waitScreen("B observes the replacement view", "MANIFEST TEST: PASS", 30*time.Second)
	if f.OperationalContext != "production" {
		t.Fatalf("the replacement's frames carry context %q", f.OperationalContext)
	}
	if code, reason := viewStatusOf(t, cCfg, ns, "chair-view-prod"); code != http.StatusForbidden || reason != string(actuation.CodeViewGrantMissing) {
		t.Fatalf("C on the replacement view: %d %q", code, reason)
	}
}

func writeFixture(t testing.TB, dir string) {
	t.Helper()
	for name, content := range storyFixture {
		p := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o777))
		must(t, os.WriteFile(p, []byte(content), 0o666))
	}
}

// checkCoalesced asserts latest-state delivery: within one connection consecutive frames
// always differ in digest and sequence numbers increase.
func checkCoalesced(t testing.TB, who string, frames []recvFrame) {
	t.Helper()
	last := map[int]recvFrame{}
	for i, f := range frames {
		if f.Type != "frame" {
			continue
		}
		if p, ok := last[f.Conn]; ok && (p.Digest == f.Digest || f.Seq <= p.Seq) {
			t.Errorf("%s frame %d repeats digest %s or sequence %d after %d", who, i, f.Digest, f.Seq, p.Seq)
		}
		last[f.Conn] = f
	}
}

var _ = apierrors.IsForbidden

// viewedSession waits for the node's data plane, makes a "test"-context environment over
// the fixture with a running shell session s in ns, and returns a client of operator op.
func viewedSession(t testing.TB, ns string) client.Client {
	t.Helper()
	waitDataPlane(t, nodeName, "")
	dir := viewEnvironment(t, ns, nodeName, workspace, "test")
	writeFixture(t, dir)
	must(t, env.Client.Create(context.Background(), shellSession(ns, "s")))
	waitSessionRunning(t, ns, "s")
	user(t, ns, "op", "workbench-operator")
	op, err := env.As("op")
	must(t, err)
	return op
}

// TestViewRefusals: each refusal has its code — a grant from a non-granter, an over-long
// or past expiry, a view above its ceiling or of an environment without context, no grant,
// no membership (kube-apiserver's RBAC, and mid-stream the node's), an expired grant (at
// connect and mid-stream) — and an observer can never send input, resize or signal, nor
// read the session's screen or events.
func TestViewRefusals(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	op := viewedSession(t, ns)

	// Admission of views.
	if err := op.Create(ctx, terminalView(ns, "low", "s", "research")); err == nil || !strings.Contains(err.Error(), string(actuation.CodeViewClassificationExceeded)) {
		t.Fatalf("a view below the environment's context: %v", err)
	}
	ev := terminalView(ns, "events", "s", "test")
	ev.Spec.Publish = "Events"
	if err := op.Create(ctx, ev); err == nil || !apierrors.IsInvalid(err) {
		t.Fatalf("a view publishing events was admitted: %v", err)
	}
	must(t, op.Create(ctx, terminalView(ns, "v", "s", "test")))

	// Admission of grants: only a granter, bounded expiry, stamped granter.
	carl := observerUser(t, ns, "carl")
	carlClient, err := env.As("carl")
	must(t, err)
	g := &wbv1.ViewGrant{ObjectMeta: metav1.ObjectMeta{Name: "self", Namespace: ns}, Spec: wbv1.ViewGrantSpec{ViewRef: "v",
		Subject: wbv1.ViewSubject{Kind: wbv1.ViewSubjectUser, Name: "carl"}, ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour))}}
	if err := carlClient.Create(ctx, g.DeepCopy()); err == nil || (!strings.Contains(err.Error(), string(actuation.CodeViewGrantNotAuthorized)) && !apierrors.IsForbidden(err)) {
		t.Fatalf("an observer granted itself: %v", err)
	}
	long := g.DeepCopy()
	long.Spec.ExpiresAt = metav1.NewTime(time.Now().Add(48 * time.Hour))
	if err := op.Create(ctx, long); err == nil || !strings.Contains(err.Error(), string(actuation.CodeViewGrantLifetimeInvalid)) {
		t.Fatalf("a 48h grant: %v", err)
	}
	badSA := g.DeepCopy()
	badSA.Spec.Subject = wbv1.ViewSubject{Kind: wbv1.ViewSubjectServiceAccount, Name: "x"}
	if err := op.Create(ctx, badSA); err == nil || !strings.Contains(err.Error(), string(actuation.CodeViewSubjectInvalid)) {
		t.Fatalf("a ServiceAccount subject without namespace: %v", err)
	}

	// No grant: membership alone is refused by the node.
	if code, reason := viewStatusOf(t, carl, ns, "v"); code != http.StatusForbidden || reason != string(actuation.CodeViewGrantMissing) {
		t.Fatalf("no grant: %d %q", code, reason)
	}
	// No membership: a grant alone is refused (kube-apiserver's RBAC, before any node).
	grant(t, op, ns, "nomember", "v", wbv1.ViewSubject{Kind: wbv1.ViewSubjectUser, Name: "nomember"}, time.Hour)
	nm := rest.CopyConfig(env.Config)
	nm.Impersonate = rest.ImpersonationConfig{UserName: "nomember"}
	if code, _ := viewStatusOf(t, nm, ns, "v"); code != http.StatusForbidden {
		t.Fatalf("no membership: %d", code)
	}

	// Membership removed mid-stream: the node's per-frame SubjectAccessReview closes it.
	gc := grant(t, op, ns, "carl", "v", wbv1.ViewSubject{Kind: wbv1.ViewSubjectUser, Name: "carl"}, time.Hour)
	var stamped wbv1.ViewGrant
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(gc), &stamped))
	if stamped.Spec.GrantedBy != "op" {
		t.Fatalf("grantedBy = %q, want the requesting user", stamped.Spec.GrantedBy)
	}
	o := watchView(t, carl, ns, "v")
	o.waitScreen("carl sees the runner", "manifest-test>", 30*time.Second)
	must(t, env.Client.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carl-observer", Namespace: ns}}))
	removed := time.Now()
	if code := o.waitFinal("carl's stream closes", 5*time.Second); code != string(actuation.CodeViewMembershipInactive) {
		t.Fatalf("membership removed: %q, want %s", code, actuation.CodeViewMembershipInactive)
	}
	t.Logf("membership removed -> stream closed in %s", time.Since(removed))

	// An expiring grant: delivered until expiresAt, then closed with the code, refused after.
	dora := observerUser(t, ns, "dora")
	grant(t, op, ns, "dora", "v", wbv1.ViewSubject{Kind: wbv1.ViewSubjectUser, Name: "dora"}, 3*time.Second)
	od := watchView(t, dora, ns, "v")
	od.waitScreen("dora sees the runner", "manifest-test>", 10*time.Second)
	if code := od.waitFinal("dora's grant expires", 10*time.Second); code != string(actuation.CodeViewGrantExpired) {
		t.Fatalf("expired grant mid-stream: %q", code)
	}
	if code, reason := viewStatusOf(t, dora, ns, "v"); code != http.StatusForbidden || reason != string(actuation.CodeViewGrantExpired) {
		t.Fatalf("expired grant at connect: %d %q", code, reason)
	}

	// Observers never act on the session and never read its events or its screen.
	eve := observerUser(t, ns, "eve")
	grant(t, op, ns, "eve", "v", wbv1.ViewSubject{Kind: wbv1.ViewSubjectUser, Name: "eve"}, time.Hour)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, subPath(ns, "terminalsessions", "s", "events")},
		{http.MethodGet, subPath(ns, "terminalsessions", "s", "screen")},
		{http.MethodPost, subPath(ns, "terminalsessions", "s", "resize")},
		{http.MethodPost, subPath(ns, "terminalsessions", "s", "signal")},
		{http.MethodPost, subPath(ns, "terminalviews", "v", "stream")},
	} {
		code, body, _ := do(t, eve, c.method, c.path, map[string]any{"rows": 10, "cols": 10, "signal": "SIGINT"})
		if code == http.StatusOK {
			t.Errorf("observer %s %s: %d %s", c.method, c.path, code, body)
		}
	}
	err = stream(ctx, eve, subPath(ns, "terminalsessions", "s", "attach")+"?stdin=true&stdout=true&tty=true",
		remotecommand.StreamOptions{Stdin: strings.NewReader("run\n"), Stdout: io.Discard, Tty: true})
	if err == nil {
		t.Error("an observer attached with input")
	}
	oe := watchView(t, eve, ns, "v")
	f := oe.waitScreen("eve sees the runner", "manifest-test>", 10*time.Second)
	if strings.Contains(strings.Join(f.Lines, "\n"), "MANIFEST TEST") {
		t.Errorf("an observer's attempt reached the terminal: %q", f.Lines)
	}

	// The node data plane serves the same stream to a bearer token of the data-plane
	// audience, under the same two authorities.
	dpCfg, _ := observerSA(t, ns, "dp")
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{agent.DataPlaneAudience()}, ExpirationSeconds: ptr(int64(600))}}
	must(t, env.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "dp", Namespace: ns}}, tr))
	_ = dpCfg
	var wn wbv1.WorkbenchNode
	must(t, env.Client.Get(ctx, client.ObjectKey{Name: nodeName}, &wn))
	hc := dataPlaneClient(t, &wn)
	direct := func() (int, string) {
		req, err := http.NewRequest(http.MethodGet, wn.Status.DataPlane.Endpoint+dpprotocol.V2Path(ns, "terminalviews", "v", "stream"), nil)
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		resp, err := hc.Do(req)
		must(t, err)
		defer func() { _ = resp.Body.Close() }()
		line, _ := bufio.NewReader(io.LimitReader(resp.Body, 1<<20)).ReadBytes('\n')
		return resp.StatusCode, string(line)
	}
	if code, body := direct(); code != http.StatusForbidden || !strings.Contains(body, string(actuation.CodeViewGrantMissing)) {
		t.Fatalf("data plane without a grant: %d %s", code, body)
	}
	grant(t, op, ns, "dp", "v", wbv1.ViewSubject{Kind: wbv1.ViewSubjectServiceAccount, Namespace: ns, Name: "dp"}, time.Hour)
	eventually(t, 10*time.Second, "a frame from the node's data plane", func() (bool, string) {
		code, body := direct()
		return code == http.StatusOK && strings.Contains(body, `"type":"frame"`) && strings.Contains(body, "manifest-test"), fmt.Sprintf("%d %s", code, body)
	})
}

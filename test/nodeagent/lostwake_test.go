package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/webhooks"
)

// denyNodeStatusWrites installs a ValidatingAdmissionPolicy (the API server's own CEL
// admission) refusing the status writes of user to command name in ns, and waits until it is
// in effect: the same policy refuses a dry-run ConfigMap named after it, which the test
// creates until it is refused. It returns a function removing the policy.
func denyNodeStatusWrites(t *testing.T, user, ns, name string) func() {
	t.Helper()
	ctx := context.Background()
	policyName := "deny-node-status-" + ns
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				{RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{wbv1.GroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{"terminalcommands/status"}}}},
				{RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("!(request.resource.resource == 'configmaps' && object.metadata.name == '%s') && "+
					"!(request.userInfo.username == '%s' && object.metadata.namespace == '%s' && object.metadata.name == '%s')", policyName, user, ns, name),
				Message: "test: the node's status writes of this command are refused",
			}},
		}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policyName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
	must(t, env.Client.Create(ctx, policy))
	must(t, env.Client.Create(ctx, binding))
	eventually(t, 30*time.Second, "the admission policy in effect", func() (bool, string) {
		err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: policyName, Namespace: ns}}, client.DryRunAll)
		return apierrors.IsInvalid(err) || (err != nil && strings.Contains(err.Error(), "refused")), fmt.Sprint(err)
	})
	return func() {
		must(t, client.IgnoreNotFound(env.Client.Delete(ctx, binding)))
		must(t, client.IgnoreNotFound(env.Client.Delete(ctx, policy)))
		eventually(t, 30*time.Second, "the admission policy gone", func() (bool, string) {
			err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: policyName, Namespace: ns}}, client.DryRunAll)
			return err == nil, fmt.Sprint(err)
		})
	}
}

// restartableNode is a node agent the test kills and starts again: the same binary, bound
// kubeconfig and config each time, over one state directory and one admitted root, with a
// Ready environment on that root in namespace ns.
type restartableNode struct {
	agentNode
	t        *testing.T
	user, ns string
	p        *agentProcess // the agent running now
}

// startRestartableNode starts node's agent (admitted root rootName) and makes its
// namespace and Ready environment. The agent running when the test ends is stopped.
func startRestartableNode(t *testing.T, node, rootName string) *restartableNode {
	t.Helper()
	n := &restartableNode{agentNode: newAgentNode(t, node, rootName, ""), t: t, user: webhooks.NodeUserPrefix + node}
	n.p = n.start(t)
	t.Cleanup(func() { n.p.Stop() })
	n.ns = namespace(t)
	readyEnvironmentOn(t, n.ns, n.root, node)
	return n
}

// kill ends the running agent with SIGKILL (no graceful stop) and waits for it.
func (n *restartableNode) kill() {
	n.t.Helper()
	must(n.t, n.p.Crash())
}

// waitStatusWriteRefused waits until the running agent logs, after this call, that the API
// server refused its status write of TerminalCommand ns/c (the node stores what it writes
// before it writes it, so the message means it is stored).
func (n *restartableNode) waitStatusWriteRefused(what string) {
	n.t.Helper()
	from := len(n.p.Log.String())
	failedWrite := "applying status of TerminalCommand " + n.ns + "/c"
	eventually(n.t, 60*time.Second, what, func() (bool, string) {
		return strings.Contains(n.p.Log.String()[from:], failedWrite), n.p.LogTail()
	})
}

// restart starts the agent again and returns it.
func (n *restartableNode) restart() *agentProcess {
	n.t.Helper()
	n.p = n.start(n.t)
	return n.p
}

// TestNodeRefusalIsTheStoredOutcome (issue 16): a refusal the node decides is stored as the
// command's one outcome before its status write. The node refuses a command whose working
// directory does not exist; its status write of the refusal is refused by the API server
// (an admission policy), and the agent is killed. While it is down the directory is created,
// so deciding again would run the command. The restarted agent publishes the stored refusal
// instead, and the command never runs.
func TestNodeRefusalIsTheStoredOutcome(t *testing.T) {
	const node = "node-refusal"
	ctx := context.Background()
	n := startRestartableNode(t, node, "refusal")
	user, state, root, ns := n.user, n.state, n.root, n.ns
	must(t, os.WriteFile(filepath.Join(root, "chaos-line"), []byte("ran\n"), 0o644))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/dd", []string{"if=../chaos-line", "oflag=append", "conv=notrunc", "status=none"}, []string{"of=count-"})))

	allow := denyNodeStatusWrites(t, user, ns, "c")
	defer allow()
	c := command(ns, "c", "/bin/dd", "if=../chaos-line", "oflag=append", "conv=notrunc", "status=none", "of=count-c")
	c.Spec.Cwd.Path = "later"
	must(t, env.Client.Create(ctx, c))
	n.waitStatusWriteRefused("the node's status write of its refusal refused")
	n.kill()
	var got wbv1.TerminalCommand
	get(t, ns, "c", &got)
	if wbv1.CommandIsFinal(got.Status.Conditions) {
		t.Fatalf("the refusal reached the API past the policy: %+v", got.Status)
	}
	db, err := store.Open(state)
	must(t, err)
	rec, ok, err := db.Commands().Get(string(got.UID))
	must(t, err)
	must(t, db.Close())
	if !ok || rec.Phase != string(wbv1.CommandRefused) || rec.Outcome == "" || rec.PGID != 0 {
		t.Fatalf("the node's refusal is not the command's stored outcome: found=%v %+v", ok, rec)
	}

	// Deciding again now would run it: the directory exists.
	must(t, os.Mkdir(filepath.Join(root, "later"), 0o755))
	allow()
	p := n.restart()
	final := waitFinal(t, ns, "c")
	if final.Status.Phase != wbv1.CommandRefused || final.Status.Refusal == nil || final.Status.Refusal.Code == "" ||
		!strings.Contains(rec.Outcome, final.Status.Refusal.Code) {
		t.Fatalf("want the stored refusal (%s) published, got %+v\nagent log:\n%s", rec.Outcome, final.Status, p.LogTail())
	}
	if _, err := os.Stat(filepath.Join(root, "later", "count-c")); !os.IsNotExist(err) {
		t.Fatalf("the refused command ran after the restart (count file: %v)", err)
	}
	t.Logf("stored and published refusal: %s: %s", final.Status.Refusal.Code, final.Status.Refusal.Message)
}

// TestWaitBoundWhenItsCommandAppearsLater: a wait whose scope names a command the manager
// does not hold yet (created just before it — the informer lags — or, here, after it) is
// bound to the command's node when the command appears, and gets its outcome. Before, the
// binder resolved no environment, never looked again, and the wait stayed unbound without an
// outcome (a lost outcome of the 100-kill chaos run, seed 1796163910058721012).
func TestWaitBoundWhenItsCommandAppearsLater(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/true", nil, nil)))
	cmdRef := wbv1.ObjectName("c")
	must(t, env.Client.Create(ctx, wait(ns, "w", wbv1.Scope{CommandRef: &cmdRef}, wbv1.ConditionKindCommandDone, 60)))
	// Ordering, not an assertion: the binder sees the wait before its command exists.
	time.Sleep(2 * time.Second)
	var w wbv1.Wait
	get(t, ns, "w", &w)
	if w.Labels[wbv1.NodeLabel] != "" {
		t.Fatalf("wait bound before its command exists: %v", w.Labels)
	}
	must(t, env.Client.Create(ctx, command(ns, "c", "/bin/true")))
	waitStatus(t, ns, "w", 60*time.Second, "Satisfied", isStatus(wbv1.WaitSatisfied))
}

// TestWakePendingSelectsWhatLacksAnOutcome: every start and resync of the agent enqueues
// every command bound to its node that has no outcome and every session that is not over —
// whatever events were seen — and nothing else.
func TestWakePendingSelectsWhatLacksAnOutcome(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/true", nil, nil)))
	must(t, env.Client.Create(ctx, command(ns, "done", "/bin/true")))
	waitFinal(t, ns, "done")
	// Held by the gate (its argv needs an operator): bound to the node, no outcome.
	must(t, env.Client.Create(ctx, command(ns, "held", "/bin/true", "--version")))
	eventually(t, 30*time.Second, "held awaiting consent and in the node's cache", func() (bool, string) {
		woken, err := ag.WakePending(ctx)
		must(t, err)
		return slices.Contains(woken, "TerminalCommand "+ns+"/held"), fmt.Sprint(woken)
	})
	woken, err := ag.WakePending(ctx)
	must(t, err)
	for _, want := range []string{"TerminalCommand " + ns + "/held", "TerminalSession " + ns + "/s"} {
		if !slices.Contains(woken, want) {
			t.Errorf("%s not woken: %v", want, woken)
		}
	}
	if slices.Contains(woken, "TerminalCommand "+ns+"/done") {
		t.Errorf("a command with its outcome was woken: %v", woken)
	}
	var held wbv1.TerminalCommand
	get(t, ns, "held", &held)
	if wbv1.CommandIsFinal(held.Status.Conditions) || held.Labels[wbv1.NodeLabel] != nodeName {
		t.Fatalf("held: labels %v status %+v", held.Labels, held.Status)
	}
}

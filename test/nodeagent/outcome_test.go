package nodeagent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/statusapply"
	"sensorium.dev/workbench/webhooks"
)

// TestOutcomeNeverReplaced reproduces the chaos run's suspected race deterministically: a
// node agent's in-flight status apply of an earlier state ("Running": Started=True, no
// outcome), under the node's own field manager with forced ownership, lands after the
// outcome was written. The API server refuses it (the CRD's transition rule: a recorded
// outcome is immutable), as it refuses a stale writer's different outcome, and the command
// keeps its one outcome.
func TestOutcomeNeverReplaced(t *testing.T) {
	ctx := context.Background()
	ns := commandInFreshEnvironment(t, "/bin/echo", []string{"once-"}, "once-1")
	done := waitFinal(t, ns, "c")
	if done.Status.Phase != wbv1.CommandSucceeded || done.Status.ExitCode == nil || *done.Status.ExitCode != 0 {
		t.Fatalf("command did not succeed: %+v", done.Status)
	}
	started := meta.FindStatusCondition(done.Status.Conditions, wbv1.ConditionStarted)
	if started == nil {
		t.Fatalf("no Started condition: %+v", done.Status)
	}
	fm := agent.FieldManager + "command"

	// The stale "Running" apply: what a pass of the killed agent sent before the outcome.
	running := wbv1.TerminalCommandStatus{NodeName: done.Status.NodeName, StartTime: done.Status.StartTime,
		Conditions: []metav1.Condition{*started}}
	_, err := statusapply.Apply(ctx, env.Client, fm, done, wbv1.TerminalCommandStatus{}, running)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "immutable: a recorded outcome") {
		t.Fatalf("a stale Running apply after the outcome: want Invalid (immutable outcome), got %v", err)
	}
	// A stale writer's different outcome (another reason and exit code) is refused too.
	failed := *done.Status.DeepCopy()
	one := int32(1)
	failed.ExitCode = &one
	meta.SetStatusCondition(&failed.Conditions, statusapply.Cond(wbv1.ConditionCompleted, true, string(wbv1.CommandFailed), "exited 1", done.Generation))
	_, err = statusapply.Apply(ctx, env.Client, fm, done, wbv1.TerminalCommandStatus{}, commandStatusOwnedByNode(&failed))
	if !apierrors.IsInvalid(err) {
		t.Fatalf("a stale different outcome: want Invalid, got %v", err)
	}
	// The exit code alone may not change either.
	changed := *done.Status.DeepCopy()
	changed.ExitCode = &one
	_, err = statusapply.Apply(ctx, env.Client, fm, done, wbv1.TerminalCommandStatus{}, commandStatusOwnedByNode(&changed))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "immutable: the exit code") {
		t.Fatalf("changing a recorded exit code: want Invalid (immutable exit code), got %v", err)
	}
	// Re-applying the same outcome (a pass that read a stale copy) is accepted.
	if _, err := statusapply.Apply(ctx, env.Client, fm, done, wbv1.TerminalCommandStatus{}, commandStatusOwnedByNode(done.Status.DeepCopy())); err != nil {
		t.Fatalf("re-applying the recorded outcome: %v", err)
	}

	var after wbv1.TerminalCommand
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(done), &after))
	c := meta.FindStatusCondition(after.Status.Conditions, wbv1.ConditionCompleted)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(wbv1.CommandSucceeded) ||
		after.Status.ExitCode == nil || *after.Status.ExitCode != 0 || after.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("the outcome changed: %+v", after.Status)
	}
}

// commandStatusOwnedByNode is the part of a command's status the node agent applies: the
// agent's own rule (phase and health conditions included once the node holds the command).
func commandStatusOwnedByNode(s *wbv1.TerminalCommandStatus) wbv1.TerminalCommandStatus {
	return agent.CommandStatusOwned(s)
}

// TestStoredOutcomeRepublished makes the node's status writes fail (its RBAC binding is
// removed) while a command ends: the agent stores the outcome but cannot publish it, and is
// then killed with SIGKILL — the API shows the command Running with no outcome while the
// node's store holds how it ended. The restarted agent (binding back) publishes the stored
// outcome (Succeeded, exit 0), not "interrupted" and never a second run.
func TestStoredOutcomeRepublished(t *testing.T) {
	const node = "node-republish"
	ctx := context.Background()
	n := startRestartableNode(t, node, "republish")
	user, ns := n.user, n.ns
	// A sleeper with a token unique to this run: it is still running when the binding goes.
	token := fmt.Sprintf("1.%06d", os.Getpid()%1000000)
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/sleep", nil, []string{token})))
	must(t, env.Client.Create(ctx, command(ns, "c", "/bin/sleep", token)))
	eventually(t, 60*time.Second, "the command Running on the node", func() (bool, string) {
		var c wbv1.TerminalCommand
		get(t, ns, "c", &c)
		return c.Status.Phase == wbv1.CommandRunning && len(findProcess("/bin/sleep", token)) == 1, fmt.Sprintf("%+v", c.Status)
	})

	// The node loses its status writes while the command ends.
	must(t, env.Client.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "workbench-node-agent-" + user}}))
	eventually(t, 10*time.Second, "the binding's removal in effect", func() (bool, string) {
		return !allowed(t, user, ns), "still authorized"
	})
	eventually(t, 60*time.Second, "the command's process to end", func() (bool, string) {
		return len(findProcess("/bin/sleep", token)) == 0, "running"
	})
	// After the process ended, the agent's status write of the outcome fails; the node
	// stores the outcome before it ever writes it, so this message means it is stored.
	n.waitStatusWriteRefused("the agent's outcome write refused")
	n.kill()
	var c wbv1.TerminalCommand
	get(t, ns, "c", &c)
	if wbv1.CommandIsFinal(c.Status.Conditions) {
		t.Fatalf("the outcome reached the API without the node's binding: %+v", c.Status)
	}

	must(t, env.Bind(ctx, "workbench-node-agent", user, ""))
	p := n.restart()
	got := waitFinal(t, ns, "c")
	if got.Status.Phase != wbv1.CommandSucceeded || got.Status.ExitCode == nil || *got.Status.ExitCode != 0 || got.Status.Refusal != nil {
		t.Fatalf("want the stored outcome (Succeeded, exit 0) republished, got %+v\nagent log:\n%s", got.Status, p.LogTail())
	}
}

// allowed asks the API server whether user may write terminalcommands/status in ns now.
func allowed(t *testing.T, user, ns string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{webhooks.NodeGroup},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Group: wbv1.GroupVersion.Group,
			Resource: "terminalcommands", Subresource: "status"}}}
	must(t, env.Client.Create(context.Background(), sar))
	return sar.Status.Allowed
}

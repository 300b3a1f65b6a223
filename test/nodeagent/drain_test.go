package nodeagent

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// TestNodeDrain cordons the agent's Node object (what `kubectl drain` does first; the
// DaemonSet's pod is never evicted) and uncordons it, through the real API server with a
// node agent process: while cordoned the running command ends Failed/interrupted and its
// process is gone, the open session ends Failed/interrupted, a new session is refused with
// node-draining, the environment is Draining and the WorkbenchNode reports Draining=True;
// after uncordon the environment is Ready again and a new session runs a command.
func TestNodeDrain(t *testing.T) {
	const node = "node-drain"
	ctx := context.Background()
	na := newAgentNode(t, node, "drain", "")
	must(t, env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	p := na.start(t)
	defer p.StopLogging(t)
	ns := namespace(t)
	dir := na.dir(t, "w")
	readyEnvironmentOn(t, ns, dir, node)
	must(t, env.Client.Create(ctx, profile(ns, "p", "/usr/bin/sleep", nil, []string{"41.25"})))
	must(t, env.Client.Create(ctx, command(ns, "long", "/usr/bin/sleep", "41.25")))
	eventually(t, 30*time.Second, "command running", func() (bool, string) {
		var c wbv1.TerminalCommand
		get(t, ns, "long", &c)
		return c.Status.Phase == wbv1.CommandRunning && len(findProcess("/usr/bin/sleep", "41.25")) == 1, fmt.Sprintf("%+v", c.Status)
	})

	cordon := func(on bool) {
		t.Helper()
		must(t, env.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)))))
	}
	nodeDraining := func(want metav1.ConditionStatus) {
		t.Helper()
		eventually(t, 30*time.Second, "WorkbenchNode Draining="+string(want), func() (bool, string) {
			var wn wbv1.WorkbenchNode
			get(t, "", node, &wn)
			c := meta.FindStatusCondition(wn.Status.Conditions, "Draining")
			return c != nil && c.Status == want, fmt.Sprintf("%+v", wn.Status.Conditions)
		})
	}
	cordon(true)
	var c wbv1.TerminalCommand
	eventually(t, 60*time.Second, "the running command interrupted by the drain", func() (bool, string) {
		get(t, ns, "long", &c)
		return wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions), fmt.Sprintf("%+v", c.Status)
	})
	if c.Status.Phase != wbv1.CommandFailed || c.Status.Refusal == nil || c.Status.Refusal.Code != string(actuation.CodeInterrupted) {
		t.Fatalf("command outcome after the drain: %+v", c.Status)
	}
	if left := findProcess("/usr/bin/sleep", "41.25"); len(left) != 0 {
		t.Fatalf("the drained command's process is still running: %v", left)
	}
	sessionFailed := func(name string, code actuation.Code) {
		t.Helper()
		eventually(t, 30*time.Second, "session "+name+" Failed/"+string(code), func() (bool, string) {
			var s wbv1.TerminalSession
			get(t, ns, name, &s)
			return s.Status.Phase == wbv1.SessionFailed && s.Status.Refusal != nil && s.Status.Refusal.Code == string(code), fmt.Sprintf("%+v", s.Status)
		})
	}
	sessionFailed("s", actuation.CodeInterrupted)
	envPhase := func(want wbv1.EnvironmentPhase) {
		t.Helper()
		eventually(t, 30*time.Second, "environment "+string(want), func() (bool, string) {
			var e wbv1.Environment
			get(t, ns, "e", &e)
			return e.Status.Phase == want, fmt.Sprintf("%+v", e.Status)
		})
	}
	envPhase(wbv1.EnvironmentDraining)
	nodeDraining(metav1.ConditionTrue)
	must(t, env.Client.Create(ctx, session(ns, "during", "e")))
	sessionFailed("during", actuation.CodeNodeDraining)

	cordon(false)
	envPhase(wbv1.EnvironmentReady)
	nodeDraining(metav1.ConditionFalse)
	must(t, env.Client.Create(ctx, session(ns, "after", "e")))
	if got := runProfiled(t, ns, "after", "after", 0, "/bin/echo", "restored"); got.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("a command after uncordon: %+v", got.Status)
	}
}

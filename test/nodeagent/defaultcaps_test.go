package nodeagent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// TestDefaultCapsServeThreeAgents runs a node agent process configured as `make run-local`
// configures it — no caps at all, so every cap is the node-sized default — and has three
// agent identities (each bound to workbench-agent only) open one session each on the same
// environment and run a command in it. All three sessions run at once and every command
// succeeds; the node publishes the free session slots left, which the node-sized default
// (at least 16 sessions, at least 8 per environment: docs/capacity.md) leaves at 13 or more
// (issue 14: a third agent's session on a node is never refused by a laptop-sized default).
func TestDefaultCapsServeThreeAgents(t *testing.T) {
	const node = "node-default-caps"
	ctx := context.Background()
	na := newAgentNode(t, node, "w", "capacityPublishMillis: 100\n")
	p := na.start(t)
	defer p.StopLogging(t)
	ns := namespace(t)
	dir := na.dir(t, "e")
	must(t, env.Client.Create(ctx, hostEnvironment(ns, "e", dir, node)))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", nil, []string{"agent-"})))
	eventually(t, 60*time.Second, "environment e Ready on "+node, func() (bool, string) {
		var e wbv1.Environment
		get(t, ns, "e", &e)
		return e.Status.Phase == wbv1.EnvironmentReady, fmt.Sprintf("%+v", e.Status)
	})

	agents := []string{"agent-a", "agent-b", "agent-c"}
	for _, a := range agents {
		must(t, env.Bind(ctx, "workbench-agent", a, ns))
		c, err := env.As(a)
		must(t, err)
		must(t, c.Create(ctx, session(ns, a, "e")))
	}
	eventually(t, 60*time.Second, "three agents' sessions Running at once", func() (bool, string) {
		seen := ""
		for _, a := range agents {
			var s wbv1.TerminalSession
			get(t, ns, a, &s)
			if s.Status.Phase != wbv1.SessionRunning {
				return false, fmt.Sprintf("%s: %+v", a, s.Status)
			}
			seen += a + " "
		}
		return true, seen
	})
	for _, a := range agents {
		c, err := env.As(a)
		must(t, err)
		cmd := command(ns, a, "/bin/echo", a)
		cmd.Spec.SessionRef = wbv1.ObjectName(a)
		must(t, c.Create(ctx, cmd))
	}
	for _, a := range agents {
		if got := waitFinal(t, ns, a); got.Status.Phase != wbv1.CommandSucceeded {
			t.Fatalf("agent %s's command: %+v", a, got.Status)
		}
	}
	var s wbv1.TerminalSession
	for _, a := range agents {
		get(t, ns, a, &s)
		if s.Status.Phase != wbv1.SessionRunning {
			t.Fatalf("session %s no longer Running after its command: %+v", a, s.Status)
		}
	}
	eventually(t, 30*time.Second, "the node's published free session slots with three open", func() (bool, string) {
		var wn wbv1.WorkbenchNode
		if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, &wn); err != nil {
			return false, err.Error()
		}
		return wn.Status.Free != nil && wn.Status.Free.Sessions >= 13, fmt.Sprintf("%+v", wn.Status.Free)
	})
}

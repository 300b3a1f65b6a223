package integration

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/kstate"
)

// TestAgentCancelsAndCloses: the workbench-agent identity may cancel its command (set
// spec.desiredState Cancelled) and close its session, and nothing else: another spec
// change, un-cancelling, a label (the node binding) and a session change other than
// closing are refused. A command cancelled before admission ends Cancelled with
// signalOrigin cancel and is never bound to a node.
func TestAgentCancelsAndCloses(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	agent := env.BoundAs(t, "workbench-agent", "agent-c", ns)
	askConsent(t, agent, ns, "held", "/usr/bin/git", "--no-pager", "log")

	update := func(c client.Client, mut func(*wbv1.TerminalCommand)) error {
		return kstate.Update(c, ns, "held", &wbv1.TerminalCommand{}, mut)
	}
	mustRefuse(t, update(agent, func(c *wbv1.TerminalCommand) { c.Spec.TimeoutSeconds = 5 }), "immutable")
	mustRefuse(t, update(agent, func(c *wbv1.TerminalCommand) {
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[wbv1.NodeLabel] = "node-a"
	}), "immutable")
	must(t, update(agent, func(c *wbv1.TerminalCommand) { c.Spec.DesiredState = wbv1.CommandDesiredCancelled }))
	c := waitCommandPhase(t, ns, "held", wbv1.CommandCancelled)
	if c.Status.SignalOrigin != "cancel" || c.Labels[wbv1.NodeLabel] != "" || isTrue(c.Status.Conditions, wbv1.ConditionAdmitted) {
		t.Fatalf("cancelled command: labels=%v status=%+v", c.Labels, c.Status)
	}
	mustRefuse(t, update(agent, func(c *wbv1.TerminalCommand) { c.Spec.DesiredState = "" }), "stays cancelled")

	// Sessions: close yes, anything else no.
	updateSession := func(mut func(*wbv1.TerminalSession)) error {
		return kstate.Update(agent, ns, "s", &wbv1.TerminalSession{}, mut)
	}
	mustRefuse(t, updateSession(func(s *wbv1.TerminalSession) { s.Labels = map[string]string{wbv1.NodeLabel: "node-b"} }), "immutable")
	must(t, updateSession(func(s *wbv1.TerminalSession) { s.Spec.DesiredState = wbv1.SessionDesiredClosed }))
	mustRefuse(t, updateSession(func(s *wbv1.TerminalSession) { s.Spec.DesiredState = wbv1.SessionDesiredOpen }), "immutable")

	// A viewer may do neither.
	viewer := env.BoundAs(t, "workbench-viewer", "viewer-c", ns)
	var cmd wbv1.TerminalCommand
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "held"}, &cmd))
	if err := viewer.Update(ctx, &cmd); !apierrors.IsForbidden(err) {
		t.Fatalf("viewer update of a command: %v", err)
	}
}

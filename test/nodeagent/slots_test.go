package nodeagent

import (
	"context"
	"fmt"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// TestBurstAboveTheCommandCapWaits: a burst of commands larger than the node's
// concurrent-command cap runs as the slots free up — every command ends Succeeded, none is
// refused command-cap-reached — because a command admitted while every slot is taken waits
// for one (bounded: internal/nodeagent/commands/slots.go) instead of being refused.
// Before the wait, the commands beyond the cap that started while two still ran were
// refused.
func TestBurstAboveTheCommandCapWaits(t *testing.T) {
	const node, burst = "node-slots", 12
	ctx := context.Background()
	na := newAgentNode(t, node, "slots", "caps:\n  concurrentCommands: 2\n")
	p := na.start(t)
	defer p.StopLogging(t)
	ns := namespace(t)
	readyEnvironmentOn(t, ns, na.dir(t, "e"), node)
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/sleep", nil, []string{"0.3"})))
	for i := range burst {
		must(t, env.Client.Create(ctx, command(ns, fmt.Sprintf("c%d", i), "/bin/sleep", "0.3")))
	}
	for i := range burst {
		if c := waitFinal(t, ns, fmt.Sprintf("c%d", i)); c.Status.Phase != wbv1.CommandSucceeded {
			t.Fatalf("command c%d of a burst of %d on a node capped at 2: %s %+v", i, burst, c.Status.Phase, c.Status.Refusal)
		}
	}
}

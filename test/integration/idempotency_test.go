package integration

import (
	"context"
	"strings"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// TestIdempotencyKeyNamesOneIntent, through the API server and the manager's gate: a key
// belongs to the first command that holds it in its namespace; a later command with the
// same key and the same spec is admitted (its node replays the first outcome), one with
// the same key and another spec is Refused idempotency-conflict — never a replay of the
// other command's outcome — and the same key in another namespace is another intent.
func TestIdempotencyKeyNamesOneIntent(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	keyed := func(name string, argv ...string) *wbv1.TerminalCommand {
		c := command(ns, name, argv...)
		c.Spec.IdempotencyKey = "status-once"
		return c
	}
	must(t, env.Client.Create(ctx, keyed("first", "/usr/bin/git", "--no-pager", "status")))
	waitCommandPhase(t, ns, "first", wbv1.CommandPending) // admitted and bound, awaiting the node

	must(t, env.Client.Create(ctx, keyed("same", "/usr/bin/git", "--no-pager", "status")))
	waitCommandPhase(t, ns, "same", wbv1.CommandPending)

	must(t, env.Client.Create(ctx, keyed("other", "/usr/bin/git", "--no-pager", "status", "--short")))
	c := waitCommandPhase(t, ns, "other", wbv1.CommandRefused)
	if c.Status.Refusal == nil || c.Status.Refusal.Code != string(actuation.CodeIdempotencyConflict) || !strings.Contains(c.Status.Refusal.Message, "first") {
		t.Fatalf("other: refusal %+v", c.Status.Refusal)
	}
	if isTrue(c.Status.Conditions, wbv1.ConditionAdmitted) || c.Labels[wbv1.NodeLabel] != "" {
		t.Fatalf("a conflicting command was admitted or bound: labels=%v conditions=%+v", c.Labels, c.Status.Conditions)
	}

	// Another namespace: the key is free there.
	ns2 := namespace(t)
	placedSetup(t, ns2, "node-a")
	c2 := command(ns2, "elsewhere", "/usr/bin/git", "--no-pager", "status", "--short")
	c2.Spec.IdempotencyKey = "status-once"
	must(t, env.Client.Create(ctx, c2))
	waitCommandPhase(t, ns2, "elsewhere", wbv1.CommandPending)
}

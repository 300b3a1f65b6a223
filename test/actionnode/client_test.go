package actionnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// TestActionRunThroughTheClientReportsItsOutcome is `kubectl workbench action run` of a
// signed C1 action that succeeds, through the functions the CLI uses (CreateActionRun,
// WaitActionRun until the run is final, ActionRunOutcomeError, the printed phase): the
// client returns on the first version with the node's Completed condition, and must report
// Succeeded with exit 0 — never "run ended Pending" (issue 26: exit 70 in 2 of 2 tries,
// because it read a status.phase the manager had not written yet). Several runs, as the
// window is one manager write wide.
func TestActionRunThroughTheClientReportsItsOutcome(t *testing.T) {
	ns, _ := setup(t)
	catalog(t, ns, "cat", perl(t, ns, "hello", "C1", `print "hello\n";`))
	cl, err := wbclient.New(env.Config, ns)
	must(t, err)
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		r, err := cl.CreateActionRun(ctx, wbclient.ActionRunRequest{Name: fmt.Sprintf("run-%d", i), Catalog: "cat", Action: "hello", Environment: "e"})
		must(t, err)
		r, err = cl.WaitActionRun(ctx, r.Name, nil)
		cancel()
		must(t, err)
		if err := wbclient.ActionRunOutcomeError(r); err != nil {
			t.Fatalf("run %d: the client reports %v for a run whose recorded outcome is %s (status.phase %q, exit %v)", i, err, reason(r), r.Status.Phase, deref(r.Status.ExitCode))
		}
		if got := wbv1.ActionRunSummary(r).Phase; got != string(wbv1.ActionRunSucceeded) {
			t.Fatalf("run %d: printed phase %q, want Succeeded", i, got)
		}
		t.Logf("run %d: Succeeded as read from the conditions; status.phase on that version was %q", i, r.Status.Phase)
	}
}

package client

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// The state `kubectl workbench action run` saw in issue 26: the node recorded the run's
// outcome (Completed=True Succeeded, exit 0, its output) and the manager, the writer of
// status.phase, had not caught up (phase still Pending). The client waits for the outcome
// condition, so it must read the outcome from the conditions: Succeeded, exit status 0 —
// never "run ended Pending" (exit 70). And a run that failed with the phase not caught up
// yet reports its exit code, not Pending.
func TestActionRunOutcomeReadFromConditionsNotPhase(t *testing.T) {
	code0, code3 := int32(0), int32(3)
	run := func(reason string, exit *int32) *wbv1.ActionRun {
		return &wbv1.ActionRun{ObjectMeta: metav1.ObjectMeta{Name: "run-x"}, Status: wbv1.ActionRunStatus{
			Phase: wbv1.ActionRunPending, ExitCode: exit, Stdout: "hello\n",
			Conditions: []metav1.Condition{
				{Type: wbv1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: wbv1.ReasonAdmittedByProfile},
				{Type: wbv1.ConditionStarted, Status: metav1.ConditionTrue, Reason: "Started"},
				{Type: wbv1.ConditionCompleted, Status: metav1.ConditionTrue, Reason: reason},
			}}}
	}
	ok := run(wbv1.ReasonSucceeded, &code0)
	if !wbv1.ActionRunIsFinal(ok.Status.Conditions) {
		t.Fatal("the fixture is not final: WaitActionRun would not have returned it")
	}
	if err := ActionRunOutcomeError(ok); err != nil {
		t.Fatalf("a run whose outcome is Succeeded (status.phase not caught up): %v, want nil", err)
	}
	if got := printedPhase(ok); got != "Succeeded" {
		t.Fatalf("summary %q", got)
	}
	err := ActionRunOutcomeError(run(wbv1.ReasonFailed, &code3))
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 3 {
		t.Fatalf("a run that exited 3 (status.phase not caught up): %v, want exit status 3", err)
	}
}

// printedPhase is what the CLI prints as the run's phase (printRun).
func printedPhase(r *wbv1.ActionRun) string { return wbv1.ActionRunSummary(r).Phase }

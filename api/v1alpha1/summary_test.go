package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// SummaryOf reads the conditions, never status.phase: a phase field left behind by its
// writer does not change what a reader shows, for every kind with a lifecycle.
func TestSummaryOfReadsConditionsNotPhase(t *testing.T) {
	done := func(reason string) []metav1.Condition {
		return []metav1.Condition{{Type: wbv1.ConditionCompleted, Status: metav1.ConditionTrue, Reason: reason}}
	}
	applied := []metav1.Condition{{Type: wbv1.ConditionApplied, Status: metav1.ConditionTrue, Reason: "Applied"}}
	cases := []struct {
		name string
		s    wbv1.Summary
		want wbv1.Summary
	}{
		{"command", wbv1.CommandSummary(&wbv1.TerminalCommand{Status: wbv1.TerminalCommandStatus{Phase: wbv1.CommandRunning, Conditions: done(wbv1.ReasonSucceeded)}}),
			wbv1.Summary{Phase: "Succeeded", Final: true, Health: wbv1.HealthCurrent}},
		{"action run", wbv1.ActionRunSummary(&wbv1.ActionRun{Status: wbv1.ActionRunStatus{Phase: wbv1.ActionRunPending, Conditions: done(wbv1.ReasonFailed)}}),
			wbv1.Summary{Phase: "Failed", Final: true, Health: wbv1.HealthStalled}},
		{"wait", wbv1.WaitSummary(&wbv1.Wait{Status: wbv1.WaitStatus{ConditionStatus: wbv1.WaitPending, Conditions: done(string(wbv1.WaitSatisfied))}}),
			wbv1.Summary{Phase: "Satisfied", Final: true, Health: wbv1.HealthCurrent}},
		{"probe", wbv1.ProbeSummary(&wbv1.Probe{Status: wbv1.ProbeStatus{Result: wbv1.ProbePending, Conditions: done(string(wbv1.ProbeFail))}}),
			wbv1.Summary{Phase: "Fail", Final: true, Health: wbv1.HealthStalled}},
		{"pending command", wbv1.CommandSummary(&wbv1.TerminalCommand{Status: wbv1.TerminalCommandStatus{Phase: wbv1.CommandSucceeded}}),
			wbv1.Summary{Phase: "Pending", Final: false, Health: wbv1.HealthProgressing}},
	}
	fp := &wbv1.FilePatch{Status: wbv1.FilePatchStatus{Phase: wbv1.FilePatchAwaitingApproval, Conditions: applied}}
	s, ok := wbv1.SummaryOf(fp)
	cases = append(cases, struct {
		name string
		s    wbv1.Summary
		want wbv1.Summary
	}{"file patch", s, wbv1.Summary{Phase: "Applied", Final: true, Health: wbv1.HealthCurrent}})
	if !ok {
		t.Fatal("SummaryOf does not know FilePatch")
	}
	for _, tc := range cases {
		if tc.s != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, tc.s, tc.want)
		}
	}
	if _, ok := wbv1.SummaryOf(&wbv1.CommandProfile{}); ok {
		t.Error("SummaryOf claims a kind without a lifecycle")
	}
}

package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// TestReplayAndViewHealthThroughKStatus: a SkillReplay is Current only when it succeeded
// with a passing proof; a TerminalView only while it publishes; a ViewGrant while it admits
// or after it was revoked as asked. Every other final state reads Failed through kstatus.
func TestReplayAndViewHealthThroughKStatus(t *testing.T) {
	om := metav1.ObjectMeta{Name: "x", Generation: 2}
	for _, tc := range []struct {
		result  wbv1.SkillReplayResult
		verdict string
		want    kstatus.Status
	}{
		{"", "", kstatus.InProgressStatus},
		{wbv1.SkillReplayRunning, "", kstatus.InProgressStatus},
		{wbv1.SkillReplaySuccess, "pass", kstatus.CurrentStatus},
		{wbv1.SkillReplaySuccess, "partial", kstatus.FailedStatus},
		{wbv1.SkillReplaySuccess, "inconclusive", kstatus.FailedStatus},
		{wbv1.SkillReplayHaltedAtEdge, "fail", kstatus.FailedStatus},
		{wbv1.SkillReplayCompletedWithSurprises, "inconclusive", kstatus.FailedStatus},
	} {
		sr := &wbv1.SkillReplay{TypeMeta: metav1.TypeMeta{Kind: "SkillReplay", APIVersion: wbv1.GroupVersion.String()}, ObjectMeta: om}
		sr.Status.Result, sr.Status.ObservedGeneration = tc.result, 2
		sr.Status.Conditions = wbv1.HealthConditions(wbv1.SkillReplayHealth(tc.result, tc.verdict), string(tc.result), "", 2)
		if got := kstatusOf(t, sr); got != tc.want {
			t.Errorf("replay %q verdict %q: kstatus %s, want %s", tc.result, tc.verdict, got, tc.want)
		}
	}
	for _, tc := range []struct {
		phase wbv1.ViewPhase
		want  kstatus.Status
	}{
		{"", kstatus.InProgressStatus},
		{wbv1.ViewPublishing, kstatus.CurrentStatus},
		{wbv1.ViewSuperseded, kstatus.FailedStatus},
		{wbv1.ViewRefused, kstatus.FailedStatus},
		{wbv1.ViewUnavailable, kstatus.FailedStatus},
	} {
		v := &wbv1.TerminalView{TypeMeta: metav1.TypeMeta{Kind: "TerminalView", APIVersion: wbv1.GroupVersion.String()}, ObjectMeta: om}
		v.Status.Phase, v.Status.ObservedGeneration = tc.phase, 2
		v.Status.Conditions = wbv1.HealthConditions(wbv1.ViewHealth(tc.phase), string(tc.phase), "", 2)
		if got := kstatusOf(t, v); got != tc.want {
			t.Errorf("view %q: kstatus %s, want %s", tc.phase, got, tc.want)
		}
	}
}

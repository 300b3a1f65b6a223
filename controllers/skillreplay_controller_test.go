package controllers

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/testkit"
)

// TestSkillReplayRefusedWholeAfterTheGrace: a replay naming a skill that does not exist is
// Running and waits within the reference grace (GitOps applies in any order); past it, the
// replay ends refused with one denial at edge 1 carrying skill-invalid and Completed=True;
// a finished replay is never written again.
func TestSkillReplayRefusedWholeAfterTheGrace(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "ctl-replay-")
	clock := newClock()
	sr := &wbv1.SkillReplay{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns}, Spec: wbv1.SkillReplaySpec{SkillRef: "missing", EnvironmentRef: "e"}}
	testkit.Must(t, env.Client.Create(ctx, sr))
	r := &SkillReplayReconciler{Client: env.Client, Recorder: recorder(t, "test-skillreplay"), Now: clock.Now}

	res, err := r.Reconcile(ctx, reqOf(sr))
	testkit.Must(t, err)
	got := get(t, &wbv1.SkillReplay{ObjectMeta: sr.ObjectMeta})
	if got.Status.Result != wbv1.SkillReplayRunning || len(got.Status.Denials) != 0 || res.RequeueAfter != ReferenceGrace {
		t.Fatalf("a young replay naming a missing skill: result %q denials %+v requeue %v", got.Status.Result, got.Status.Denials, res.RequeueAfter)
	}
	clock.Advance(ReferenceGrace + time.Minute) // (the clock was read before the replay was created)
	reconcileOnce(t, r, got)
	got = get(t, got)
	if got.Status.Result == wbv1.SkillReplayRunning || got.Status.Result == wbv1.SkillReplaySuccess || len(got.Status.Denials) != 1 ||
		got.Status.Denials[0].Code != string(actuation.CodeSkillInvalid) || got.Status.Denials[0].Edge != 1 ||
		!isTrueCond(got.Status.Conditions, wbv1.ConditionCompleted) || got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("past the grace: result %q denials %+v conditions %+v", got.Status.Result, got.Status.Denials, got.Status.Conditions)
	}
	rv := got.ResourceVersion
	clock.Advance(ReferenceGrace)
	reconcileOnce(t, r, got)
	if got = get(t, got); got.ResourceVersion != rv {
		t.Fatalf("a finished replay was written again (resourceVersion %s -> %s)", rv, got.ResourceVersion)
	}
}

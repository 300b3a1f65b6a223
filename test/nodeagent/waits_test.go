package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

func wait(ns, name string, scope wbv1.Scope, kind wbv1.ConditionKind, deadlineSeconds int32) *wbv1.Wait {
	return &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.WaitSpec{
		Scope: &scope, Condition: wbv1.WaitCondition{Kind: kind}, DeadlineSeconds: deadlineSeconds}}
}

func fileScope(path string) wbv1.Scope {
	return wbv1.Scope{File: &wbv1.FileRef{EnvironmentRef: "e", Root: "repo", Path: wbv1.RelativePath(path)}}
}

// waitStatus polls the Wait until cond holds.
func waitStatus(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*wbv1.WaitStatus) bool) *wbv1.Wait {
	t.Helper()
	var w wbv1.Wait
	eventually(t, timeout, "wait "+name+" "+what, func() (bool, string) {
		get(t, ns, name, &w)
		return cond(&w.Status), fmt.Sprintf("%+v", w.Status)
	})
	return &w
}

func isStatus(s wbv1.WaitConditionStatus) func(*wbv1.WaitStatus) bool {
	return func(st *wbv1.WaitStatus) bool { return st.ConditionStatus == s }
}

func completed(conds []metav1.Condition) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == wbv1.ConditionCompleted {
			return &conds[i]
		}
	}
	return nil
}

// TestWaitCommandDone: a wait on terminal.command.done is satisfied when the command it
// names finishes, and records the node, its start and its duration.
func TestWaitCommandDone(t *testing.T) {
	ctx := context.Background()
	ns := commandInFreshEnvironment(t, "/bin/sleep", []string{"2"}, "2")
	cmdRef := wbv1.ObjectName("c")
	must(t, env.Client.Create(ctx, wait(ns, "w", wbv1.Scope{CommandRef: &cmdRef}, wbv1.ConditionKindCommandDone, 60)))
	w := waitStatus(t, ns, "w", 60*time.Second, "Satisfied", isStatus(wbv1.WaitSatisfied))
	c := waitFinal(t, ns, "c")
	if c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("command: %+v", c.Status)
	}
	cond := completed(w.Status.Conditions)
	if w.Status.NodeName != nodeName || w.Status.StartTime == nil || w.Status.DurationMilliseconds <= 0 || w.Status.Refusal != nil ||
		cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != string(wbv1.WaitSatisfied) {
		t.Fatalf("wait status = %+v", w.Status)
	}
	wantKStatus(t, w, kstatus.CurrentStatus)
}

// TestWaitFileExistsByInotify: a file.exists wait on a path whose directory does not exist
// yet stays Pending (counted in the WorkbenchNode), then is satisfied within moments of
// the file appearing: it is woken by inotify, not by a polling interval.
func TestWaitFileExistsByInotify(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	must(t, env.Client.Create(ctx, wait(ns, "w", fileScope("later/ready.txt"), wbv1.ConditionKindFileExists, 300)))
	waitStatus(t, ns, "w", 30*time.Second, "Pending", isStatus(wbv1.WaitPending))
	eventually(t, 20*time.Second, "WorkbenchNode counting the pending wait", func() (bool, string) {
		var n wbv1.WorkbenchNode
		get(t, "", nodeName, &n)
		return n.Status.ActiveWaits >= 1, fmt.Sprintf("activeWaits=%d", n.Status.ActiveWaits)
	})
	time.Sleep(time.Second) // the wait holds while nothing happens
	waitStatus(t, ns, "w", time.Second, "still Pending", isStatus(wbv1.WaitPending))

	must(t, os.MkdirAll(filepath.Join(dir, "later"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "later", "ready.txt"), []byte("ok\n"), 0o644))
	created := time.Now()
	w := waitStatus(t, ns, "w", 10*time.Second, "Satisfied", isStatus(wbv1.WaitSatisfied))
	if took := time.Since(created); took > 5*time.Second {
		t.Fatalf("satisfied %s after the file appeared", took)
	}
	if w.Status.NodeName != nodeName || w.Status.DurationMilliseconds < 1000 {
		t.Fatalf("wait status = %+v", w.Status)
	}
}

// TestWaitOutputMatchesStructuredSession: a wait on the output of a session without a PTY
// program (its event ring holds the output of its structured commands) is satisfied by
// the command that prints the pattern, with the sequence range it saw.
func TestWaitOutputMatchesStructuredSession(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	sessRef := wbv1.ObjectName("s")
	w := wait(ns, "w", wbv1.Scope{SessionRef: &sessRef}, wbv1.ConditionKindOutputMatches, 60)
	w.Spec.Condition.Pattern = ptr("build (ok|done)")
	must(t, env.Client.Create(ctx, w))
	waitStatus(t, ns, "w", 30*time.Second, "Pending", isStatus(wbv1.WaitPending))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", nil, []string{"build", "done"})))
	must(t, env.Client.Create(ctx, command(ns, "c", "/bin/echo", "build", "done")))
	got := waitStatus(t, ns, "w", 30*time.Second, "Satisfied", isStatus(wbv1.WaitSatisfied))
	c := waitFinal(t, ns, "c")
	if o := got.Status.Observed; o == nil || o.SeqFrom != c.Status.SeqFrom || o.SeqTo != c.Status.SeqTo {
		t.Fatalf("wait observed %+v; the command's output is events %d..%d", got.Status.Observed, c.Status.SeqFrom, c.Status.SeqTo)
	}
}

// TestWaitTimesOutAndKillsNothing: a wait whose deadline passes ends TimedOut while the
// command it watched keeps running, and that command later exits on its own.
func TestWaitTimesOutAndKillsNothing(t *testing.T) {
	ctx := context.Background()
	ns := commandInFreshEnvironment(t, "/bin/sleep", []string{"8"}, "8")
	cmdRef := wbv1.ObjectName("c")
	must(t, env.Client.Create(ctx, wait(ns, "w", wbv1.Scope{CommandRef: &cmdRef}, wbv1.ConditionKindCommandDone, 2)))
	w := waitStatus(t, ns, "w", 30*time.Second, "TimedOut", isStatus(wbv1.WaitTimedOut))
	var c wbv1.TerminalCommand
	get(t, ns, "c", &c)
	if c.Status.Phase != wbv1.CommandRunning {
		t.Fatalf("the watched command is %s after the wait timed out: %+v", c.Status.Phase, c.Status)
	}
	if w.Status.Refusal != nil || w.Status.DurationMilliseconds <= 0 {
		t.Fatalf("wait status = %+v", w.Status)
	}
	wantKStatus(t, w, kstatus.FailedStatus) // a timed-out wait is not healthy
	done := waitFinal(t, ns, "c")
	if done.Status.Phase != wbv1.CommandSucceeded || done.Status.SignalOrigin != "exit" {
		t.Fatalf("the command did not run to its own end: %+v", done.Status)
	}
}

// fileExistsProbe is Probe ns/name: does path exist in root repo of environment e, asked
// once with the given timeout.
func fileExistsProbe(ns, name, path string, timeoutSeconds int32) *wbv1.Probe {
	s := fileScope(path)
	return &wbv1.Probe{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: wbv1.ProbeSpec{Scope: &s, Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindFileExists}, TimeoutSeconds: timeoutSeconds}}
}

// probeResult waits (30 s) until Probe ns/name has a result and fails the test unless it
// is want, observed, with no refusal.
func probeResult(t *testing.T, ns, name string, want wbv1.ProbeResult) *wbv1.Probe {
	t.Helper()
	var p wbv1.Probe
	eventually(t, 30*time.Second, "probe "+name+" result", func() (bool, string) {
		get(t, ns, name, &p)
		return p.Status.Result != "" && p.Status.Result != "Pending", fmt.Sprintf("%+v", p.Status)
	})
	if p.Status.Result != want || p.Status.ObservedAt == nil || p.Status.Refusal != nil {
		t.Fatalf("probe %s: %+v, want %s", name, p.Status, want)
	}
	return &p
}

// TestProbeFileExists: a probe checks once, now: Pass for a present file, Fail for an
// absent one.
func TestProbeFileExists(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	must(t, os.WriteFile(filepath.Join(dir, "present.txt"), []byte("x"), 0o644))
	must(t, env.Client.Create(ctx, fileExistsProbe(ns, "present", "present.txt", 5)))
	must(t, env.Client.Create(ctx, fileExistsProbe(ns, "absent", "absent.txt", 5)))
	for name, want := range map[string]wbv1.ProbeResult{"present": "Pass", "absent": "Fail"} {
		p := probeResult(t, ns, name, want)
		if want == "Pass" {
			wantKStatus(t, p, kstatus.CurrentStatus)
		} else {
			wantKStatus(t, p, kstatus.FailedStatus)
		}
	}
}

// TestWaitInterruptedByRestart: a wait pending when the agent stops (gracefully: its
// context ends, which must not be reported as a cancellation) is not re-registered by the
// next agent process; it ends Failed with refusal code interrupted.
func TestWaitInterruptedByRestart(t *testing.T) {
	const node = "node-restart"
	ctx := context.Background()
	na := newAgentNode(t, node, "restart", "")
	root := na.root

	first := na.start(t)
	ns := namespace(t)
	readyEnvironmentOn(t, ns, root, node)
	must(t, env.Client.Create(ctx, wait(ns, "w", fileScope("never.txt"), wbv1.ConditionKindFileExists, 600)))
	waitStatus(t, ns, "w", 30*time.Second, "Pending", isStatus(wbv1.WaitPending))
	must(t, first.Terminate())
	var w wbv1.Wait
	get(t, ns, "w", &w)
	if w.Status.ConditionStatus != wbv1.WaitPending {
		t.Fatalf("stopping the agent changed the wait: %+v\nagent log:\n%s", w.Status, first.LogTail())
	}

	second := na.start(t)
	defer second.Stop()
	got := waitStatus(t, ns, "w", 60*time.Second, "Failed", isStatus(wbv1.WaitFailed))
	if got.Status.Refusal == nil || got.Status.Refusal.Code != "interrupted" || got.Status.NodeName != node {
		t.Fatalf("status = %+v", got.Status)
	}
}

// TestWaitCancelledByDesiredState: spec.desiredState Cancelled ends a pending wait as
// Cancelled with its Completed condition, and the API server refuses to take it back.
func TestWaitCancelledByDesiredState(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, wait(ns, "w", fileScope("never/there.txt"), wbv1.ConditionKindFileExists, 300)))
	w := waitStatus(t, ns, "w", 30*time.Second, "Pending", isStatus(wbv1.WaitPending))

	patch := client.MergeFrom(w.DeepCopy())
	w.Spec.DesiredState = wbv1.WaitDesiredCancelled
	must(t, env.Client.Patch(ctx, w, patch))
	w = waitStatus(t, ns, "w", 30*time.Second, "Cancelled", isStatus(wbv1.WaitCancelled))
	cond := completed(w.Status.Conditions)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != string(wbv1.WaitCancelled) {
		t.Fatalf("wait status = %+v", w.Status)
	}

	undo := client.MergeFrom(w.DeepCopy())
	w.Spec.DesiredState = ""
	if err := env.Client.Patch(ctx, w, undo); err == nil {
		t.Fatal("clearing desiredState of a cancelled wait was accepted")
	}
}

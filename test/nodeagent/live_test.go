package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// buildScript writes build.py: it prints a line, then blocks until a release file appears
// in its cwd (with ignoreTerm it also ignores SIGTERM, so only the group-wide SIGKILL ends
// it), then prints another line and leaves a side-effect file.
func buildScript(t *testing.T, dir string, ignoreTerm bool) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 for a long-running build stand-in (shells are not admissible executables)")
	}
	trap := ""
	if ignoreTerm {
		trap = "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
	}
	must(t, writeFile(filepath.Join(dir, "build.py"), "import os, signal, time\n"+trap+
		"print('build started', flush=True)\nwhile not os.path.exists('release'):\n    time.sleep(0.05)\n"+
		"print('build finished', flush=True)\nopen('finished', 'w').close()\n"))
}

// TestCommandOutputIsLive: a structured command's output reaches the session's event ring
// while it runs: a terminal.output.matches wait on the session is Satisfied while the
// command is still running (it blocks until the test releases it), and after release the
// outcome's sequence range covers the whole output.
func TestCommandOutputIsLive(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	buildScript(t, dir, false)
	must(t, env.Client.Create(ctx, profile(ns, "p", "/usr/bin/python3", []string{"build.py"}, nil)))
	sessRef := wbv1.ObjectName("s")
	w := wait(ns, "w", wbv1.Scope{SessionRef: &sessRef}, wbv1.ConditionKindOutputMatches, 60)
	w.Spec.Condition.Pattern = ptr("build started")
	must(t, env.Client.Create(ctx, w))
	must(t, env.Client.Create(ctx, command(ns, "c", "/usr/bin/python3", "build.py")))
	waitStatus(t, ns, "w", 30*time.Second, "Satisfied", isStatus(wbv1.WaitSatisfied))
	var c wbv1.TerminalCommand
	get(t, ns, "c", &c)
	if wbv1.CommandIsFinal(c.Status.Conditions) {
		t.Fatalf("the command ended before its release: %+v", c.Status)
	}
	must(t, writeFile(filepath.Join(dir, "release"), ""))
	final := waitFinal(t, ns, "c")
	if final.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("status = %+v", final.Status)
	}
	if got := output(t, ns, final); got != "build started\nbuild finished\n" {
		t.Fatalf("output = %q (events %d..%d)", got, final.Status.SeqFrom, final.Status.SeqTo)
	}
}

// TestCommandCancel: spec.desiredState Cancelled on a running command terminates its
// process group — here a script that ignores SIGTERM, so SIGKILL after the grace period is
// what ends it — with outcome Cancelled and signalOrigin cancel; it never reaches the line
// after its wait (the side-effect file "finished" never exists).
func TestCommandCancel(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	buildScript(t, dir, true)
	must(t, env.Client.Create(ctx, profile(ns, "p", "/usr/bin/python3", []string{"build.py"}, nil)))
	must(t, env.Client.Create(ctx, command(ns, "c", "/usr/bin/python3", "build.py")))
	var c wbv1.TerminalCommand
	eventually(t, 30*time.Second, "command running with output", func() (bool, string) {
		get(t, ns, "c", &c)
		return c.Status.Phase == wbv1.CommandRunning, fmt.Sprintf("%+v", c.Status)
	})
	update(t, env.Client, ns, "c", func(c *wbv1.TerminalCommand) { c.Spec.DesiredState = wbv1.CommandDesiredCancelled })
	final := waitFinal(t, ns, "c")
	if final.Status.Phase != wbv1.CommandCancelled || final.Status.SignalOrigin != "cancel" || final.Status.StartTime == nil {
		t.Fatalf("status = %+v", final.Status)
	}
	// Releasing it now changes nothing: the group is gone.
	must(t, writeFile(filepath.Join(dir, "release"), ""))
	if _, err := os.Stat(filepath.Join(dir, "finished")); !os.IsNotExist(err) {
		t.Fatalf("the cancelled command went on: %v", err)
	}
}

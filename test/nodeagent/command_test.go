package nodeagent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

func sessionUID(t *testing.T, ns string) string {
	t.Helper()
	var s wbv1.TerminalSession
	get(t, ns, "s", &s)
	return string(s.UID)
}

func output(t *testing.T, ns string, c *wbv1.TerminalCommand) string {
	t.Helper()
	out, _, err := ag.Output(sessionUID(t, ns), uint64(c.Status.SeqFrom), uint64(c.Status.SeqTo))
	must(t, err)
	return string(out)
}

// TestCommandSucceeds: kubectl apply of a profile, environment, session and command ends in
// exactly one recorded outcome with the output's digest and sequence range.
func TestCommandSucceeds(t *testing.T) {
	ns := commandInFreshEnvironment(t, "/bin/echo", []string{"hello"}, "hello")
	c := waitFinal(t, ns, "c")
	if c.Status.Phase != wbv1.CommandSucceeded || c.Status.ExitCode == nil || *c.Status.ExitCode != 0 || c.Status.SignalOrigin != "exit" {
		t.Fatalf("status = %+v", c.Status)
	}
	if c.Status.StdoutBytes != 6 || c.Status.NodeName != nodeName || c.Status.StartTime == nil || c.Status.SeqFrom == 0 {
		t.Fatalf("status = %+v", c.Status)
	}
	if got := output(t, ns, c); got != "hello\n" {
		t.Fatalf("output = %q", got)
	}
}

// TestCommandHasNoNetwork: a command that tries to reach a listener on the host fails, and
// the listener never sees a connection.
func TestCommandHasNoNetwork(t *testing.T) {
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs /usr/bin/curl to attempt a connection from inside the sandbox")
	}
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer func() { _ = ln.Close() }()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_, _ = c.Write([]byte("HTTP/1.0 200 OK\r\n\r\nreached\n"))
			_ = c.Close()
		}
	}()
	url := "http://" + ln.Addr().String() + "/"
	// The same request works from the test process: the listener is real.
	if conn, err := net.Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatalf("host-side dial: %v", err)
	} else {
		_ = conn.Close()
	}
	for accepted.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	before := accepted.Load()
	must(t, env.Client.Create(ctx, profile(ns, "p", "/usr/bin/curl", []string{"-sS", "--max-time", "5"}, []string{"http://127.0.0.1:"})))
	must(t, env.Client.Create(ctx, command(ns, "c", "/usr/bin/curl", "-sS", "--max-time", "5", url)))
	c := waitFinal(t, ns, "c")
	if c.Status.Phase != wbv1.CommandFailed || c.Status.ExitCode == nil || *c.Status.ExitCode == 0 {
		t.Fatalf("curl from the sandbox reached the host: %+v", c.Status)
	}
	if accepted.Load() != before {
		t.Fatalf("the host listener saw %d connections from the sandbox", accepted.Load()-before)
	}
	if out := output(t, ns, c); strings.Contains(out, "reached") {
		t.Fatalf("output %q", out)
	}
}

// TestCommandEnvironmentIsCurated: a forbidden key in the agent's own environment never
// reaches the process; only the profile's defaults (and TMPDIR) do.
func TestCommandEnvironmentIsCurated(t *testing.T) {
	ctx := context.Background()
	t.Setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "leak")
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/usr/bin/printenv", nil, nil)))
	must(t, env.Client.Create(ctx, command(ns, "c", "/usr/bin/printenv")))
	c := waitFinal(t, ns, "c")
	if c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("status = %+v", c.Status)
	}
	out := output(t, ns, c)
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		keys = append(keys, strings.SplitN(line, "=", 2)[0])
	}
	if strings.Join(keys, ",") != "LANG,PATH,TMPDIR" {
		t.Fatalf("environment keys = %v (output %q)", keys, out)
	}
}

// TestCommandTimeout: the process group is terminated and the outcome says so.
func TestCommandTimeout(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/sleep", nil, []string{"3"})))
	c := command(ns, "c", "/bin/sleep", "30")
	c.Spec.TimeoutSeconds = 1
	must(t, env.Client.Create(ctx, c))
	c = waitFinal(t, ns, "c")
	if c.Status.Phase != wbv1.CommandTimedOut || c.Status.SignalOrigin != "timeout" {
		t.Fatalf("status = %+v", c.Status)
	}
}

// TestCommandWritesConfined: writes inside the root succeed; writes outside fail or land
// in the sandbox's own (private, discarded) tree, never on the host.
func TestCommandWritesConfined(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	outside := filepath.Join(stateDir, "..", "outside-"+ns)
	atRoot := "/outside-" + ns
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/mkdir", nil, []string{"inside", "/"})))
	must(t, env.Client.Create(ctx, command(ns, "in", "/bin/mkdir", "inside")))
	must(t, env.Client.Create(ctx, command(ns, "out", "/bin/mkdir", filepath.Clean(outside))))
	must(t, env.Client.Create(ctx, command(ns, "root", "/bin/mkdir", atRoot)))
	if c := waitFinal(t, ns, "in"); c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("inside: %+v", c.Status)
	}
	if _, err := os.Stat(filepath.Join(dir, "inside")); err != nil {
		t.Fatalf("inside dir missing: %v", err)
	}
	// The sandbox's root is read-only.
	if c := waitFinal(t, ns, "root"); c.Status.Phase != wbv1.CommandFailed {
		t.Fatalf("at the root: %+v", c.Status)
	}
	if _, err := os.Stat(atRoot); err == nil {
		t.Fatalf("the sandbox created %s on the host", atRoot)
	}
	waitFinal(t, ns, "out")
	if _, err := os.Stat(outside); err == nil {
		t.Fatalf("the sandbox created %s outside the environment", outside)
	}
}

// TestCommandIdempotencyReplay: a second command with the same idempotency key replays the
// first outcome without running again.
func TestCommandIdempotencyReplay(t *testing.T) {
	ctx := context.Background()
	ns, _ := readyWorkEnvironment(t)
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/mkdir", nil, []string{"once"})))
	c1 := command(ns, "c1", "/bin/mkdir", "once")
	c1.Spec.IdempotencyKey = "make-once"
	must(t, env.Client.Create(ctx, c1))
	if c := waitFinal(t, ns, "c1"); c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("c1: %+v", c.Status)
	}
	c2 := command(ns, "c2", "/bin/mkdir", "once")
	c2.Spec.IdempotencyKey = "make-once"
	must(t, env.Client.Create(ctx, c2))
	c := waitFinal(t, ns, "c2")
	// A re-run would fail (the directory exists); the replay reports the first outcome.
	if c.Status.Phase != wbv1.CommandSucceeded || !strings.Contains(conditionMessage(c, wbv1.ConditionCompleted), "replay of c1") {
		t.Fatalf("c2: %+v", c.Status)
	}
}

func conditionMessage(c *wbv1.TerminalCommand, t string) string {
	for _, cd := range c.Status.Conditions {
		if cd.Type == t {
			return cd.Message
		}
	}
	return fmt.Sprint(c.Status.Conditions)
}

// TestHostBackendsAttestTheSandbox: the node's host-local and fixture-copy.v1 capabilities
// say whether the process sandbox can be established (here it can: condition True).
func TestHostBackendsAttestTheSandbox(t *testing.T) {
	for _, id := range []string{"host-local", "fixture-copy.v1"} {
		eventually(t, 30*time.Second, "the "+id+" ProcessSandbox condition", func() (bool, string) {
			var c wbv1.BackendCapability
			if err := env.Client.Get(context.Background(), client.ObjectKey{Name: nodeName + "." + id}, &c); err != nil {
				return false, err.Error()
			}
			for _, cond := range c.Status.Conditions {
				if cond.Type == "ProcessSandbox" {
					return cond.Status == "True", fmt.Sprintf("%+v", cond)
				}
			}
			return false, fmt.Sprintf("no ProcessSandbox condition in %+v", c.Status)
		})
	}
}

package procexec

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	agentDiesMode = "agent-dies"
	// agentDiesTimeout and agentDiesGrace are the command's deadline in the child.
	agentDiesTimeout = 3 * time.Second
	agentDiesGrace   = time.Second
)

// agentDiesChild is an "agent": it starts a command that would run for an hour under a
// short deadline, prints its sandbox's helper pid and waits to be killed (SIGKILL: none
// of its timers ever fire).
func agentDiesChild() int {
	r := NewRunner(Limits{HelperPath: os.Getenv("PROCEXEC_TEST_HELPER")})
	h, err := r.Start(context.Background(), Spec{Argv: []string{"/bin/sleep", "3600"}, Timeout: agentDiesTimeout, Grace: agentDiesGrace})
	if err != nil {
		fmt.Println("err", err)
		return 1
	}
	fmt.Println(h.Info().Pid)
	select {} // until killed
}

// TestSandboxEndsAtDeadlineWhenAgentKilled: the process that started a command is killed
// with SIGKILL right after the start (an agent crash: its own deadline timer never
// fires). The sandbox's PID 1 kills the command itself after the deadline and grace (plus
// a margin): the helper, re-parented to this test binary (a subreaper), ends with the
// program killed by SIGKILL, no earlier than the deadline — and with it its PID namespace,
// so nothing of the command is left. Before the fix the command ran its full hour.
func TestSandboxEndsAtDeadlineWhenAgentKilled(t *testing.T) {
	requireSandbox(t)
	cmd := exec.Command(selfExe(t))
	cmd.Env = []string{testModeEnv + "=" + agentDiesMode, "PROCEXEC_TEST_HELPER=" + slimHelper(t), noRaceExitSleep, "TMPDIR=" + t.TempDir()}
	line, err := firstLine(t, cmd)
	started := time.Now()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil || strings.HasPrefix(line, "err") {
		t.Fatalf("child: %q %v", line, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("child reported %q, want the helper's pid", line)
	}
	done := reap(t, pid)
	// A failure bound only (the command would otherwise run an hour): far beyond the
	// deadline, grace and margin.
	select {
	case ws := <-done:
		took := time.Since(started)
		t.Logf("helper ended %v after %s (deadline %s, grace %s)", ws, took, agentDiesTimeout, agentDiesGrace)
		if !ws.Exited() || ws.ExitStatus() != 128+int(syscall.SIGKILL) {
			t.Errorf("helper ended %v, want exit %d (its program killed by SIGKILL)", ws, 128+int(syscall.SIGKILL))
		}
		if took < agentDiesTimeout {
			t.Errorf("the command was killed after %s, before its deadline %s", took, agentDiesTimeout)
		}
	case <-time.After(agentDiesTimeout + agentDiesGrace + time.Minute):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the command's sandbox (helper %d) still runs a minute past its deadline after its agent was killed", pid)
	}
}

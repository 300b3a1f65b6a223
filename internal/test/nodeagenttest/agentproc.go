package nodeagenttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/test/proctest"
	"sensorium.dev/workbench/internal/test/testkit"
)

// Process is a node agent running as its own process (the real binary, see BuildAgent),
// as a DaemonSet pod would: one process is one agent. Its stdout and stderr go to Log.
type Process struct {
	Cmd *exec.Cmd
	Log testkit.LockedBuffer
}

// StartProcess starts the agent binary bin with --config config and --kubeconfig
// kubeconfig, PATH=/usr/bin:/bin and env (KEY=value) as its whole environment.
func StartProcess(bin, kubeconfig, config string, env ...string) (*Process, error) {
	p := &Process{Cmd: exec.Command(bin, "--config", config, "--kubeconfig", kubeconfig)}
	p.Cmd.Stdout, p.Cmd.Stderr = &p.Log, &p.Log
	p.Cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the node agent %s: %w", bin, err)
	}
	return p, nil
}

// Signal sends sig to the agent and waits until it has exited.
func (p *Process) Signal(sig syscall.Signal) error {
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return err
	}
	_ = p.Cmd.Wait()
	return nil
}

// Crash kills the agent with SIGKILL (it has no chance to clean up) and waits for it.
func (p *Process) Crash() error { return p.Signal(syscall.SIGKILL) }

// Terminate stops the agent with SIGTERM (a graceful stop, as `kubectl delete pod` does)
// and waits for it.
func (p *Process) Terminate() error { return p.Signal(syscall.SIGTERM) }

// stopWithin bounds Stop's wait for a graceful exit.
const stopWithin = 20 * time.Second

// Stop ends the agent with SIGTERM and waits for it, killing it if it has not exited
// within 20 s (a teardown: no error).
func (p *Process) Stop() {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(stopWithin):
		_ = p.Cmd.Process.Kill()
		<-done
	}
}

// StopLogging is Stop and, when the test failed, logs the end of the agent's output.
func (p *Process) StopLogging(t testing.TB) {
	p.Stop()
	if t.Failed() {
		t.Logf("agent log:\n%s", p.LogTail())
	}
}

// LogTail is the last 3000 bytes of the agent's output (for a failure message).
func (p *Process) LogTail() string { return Tail(p.Log.String()) }

// Tail is the last 3000 bytes of s.
func Tail(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}

// WriteConfig writes a node agent config into dir: node, its state dir, one admitted root
// (rootName: root), a 2 s heartbeat, then extra (YAML lines, may be empty). It returns the
// file's path.
func WriteConfig(dir, node, state, rootName, root, extra string) (string, error) {
	p := filepath.Join(dir, "node-agent.yaml")
	body := fmt.Sprintf("nodeName: %s\nstateDir: %s\nadmittedRoots:\n  %s: %s\nheartbeatSeconds: 2\n", node, state, rootName, root) + extra
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		return "", fmt.Errorf("writing the config of node %s: %w", node, err)
	}
	return p, nil
}

// FindProcesses returns the pids of the live (not zombie) processes whose command line is
// exactly argv.
func FindProcesses(argv ...string) []int {
	var pids []int
	for _, pid := range proctest.Exactly(argv...) {
		if proctest.Live(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

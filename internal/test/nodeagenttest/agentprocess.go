package nodeagenttest

import (
	"io"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// StartAgentProcess starts the node agent binary bin with config and kubeconfig as its own
// process (PATH its only environment variable, its output into out) and stops it when the
// test ends: SIGTERM (the agent ends its sessions' programs before it exits), then SIGKILL
// after grace. A process the test has already reaped is left alone.
func StartAgentProcess(t testing.TB, bin, config, kubeconfig string, out io.Writer, grace time.Duration) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "--config", config, "--kubeconfig", kubeconfig)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the node agent: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState != nil {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return cmd
}

package security

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/testkit"
)

// TestSandboxUnavailableFailsClosed: a second node agent (the real binary) whose sandbox
// helper cannot establish the sandbox (it reads its configuration and exits without setting
// anything up, as when a kernel lacks a primitive the helper needs) publishes
// ProcessSandbox=False with the stable code first in its message on its host-local and
// fixture-copy.v1 capabilities, and a command placed on it is refused with that code:
// nothing of the command runs.
func TestSandboxUnavailableFailsClosed(t *testing.T) {
	const node = "node-sec-nosandbox"
	ctx := context.Background()
	// The real agent binary as its own process: one process runs one agent.
	bin, err := nodeagenttest.BuildAgent(t.TempDir())
	must(t, err)
	kcPath, err := nodeagenttest.NodeKubeconfig(env, node, t.TempDir())
	must(t, err)
	must(t, nodeagenttest.BindNodeAgent(ctx, env, node))
	// The helper reads the start of its configuration (so the agent has placed it in its
	// cgroup and cloned the roots) and exits without setting anything up or reporting.
	helperDir, err := os.MkdirTemp("", "wb-broken-helper-")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(helperDir) })
	must(t, os.Chmod(helperDir, 0o755)) // exec'd inside the helper's user namespace
	helper := filepath.Join(helperDir, "helper")
	must(t, os.WriteFile(helper, []byte("#!/bin/sh\n/usr/bin/head -c 8 <&3 >/dev/null\nexit 1\n"), 0o755))
	dir := filepath.Join(tmp, "nosandbox-work")
	must(t, os.MkdirAll(dir, 0o755))
	config := filepath.Join(t.TempDir(), "node-agent.yaml")
	must(t, os.WriteFile(config, []byte(fmt.Sprintf("nodeName: %s\nstateDir: %s\nadmittedRoots:\n  work: %s\nheartbeatSeconds: 2\nsandboxHelper: %s\n",
		node, filepath.Join(tmp, "nosandbox-state"), dir, helper)), 0o600))
	var log testkit.LockedBuffer // the agent's two output streams, serialised
	t.Cleanup(func() {           // runs after the agent's stop
		if t.Failed() {
			t.Logf("agent log:\n%s", tail(log.String()))
		}
	})
	nodeagenttest.StartAgentProcess(t, bin, config, kcPath, &log, 20*time.Second)
	const wantCode = "sandbox-setup-failed"
	for _, b := range []wbv1.BackendID{wbv1.BackendHostLocal, wbv1.BackendFixtureCopy} {
		var bc wbv1.BackendCapability
		eventually(t, 60*time.Second, "ProcessSandbox=False on "+string(b), func() (bool, string) {
			if err := env.Client.Get(ctx, client.ObjectKey{Name: node + "." + string(b)}, &bc); err != nil {
				return false, err.Error()
			}
			for _, c := range bc.Status.Conditions {
				if c.Type == processSandboxCondition {
					return c.Status == metav1.ConditionFalse && strings.HasPrefix(c.Message, wantCode+":"), fmt.Sprintf("%+v", c)
				}
			}
			return false, fmt.Sprintf("no %s condition: %+v", processSandboxCondition, bc.Status.Conditions)
		})
	}

	ns := namespace(t)
	repo, err := os.MkdirTemp(dir, "repo-")
	must(t, err)
	must(t, os.Chmod(repo, 0o755))
	marker := filepath.Join(repo, "ran")
	must(t, os.WriteFile(filepath.Join(repo, "Makefile"), []byte(targetProbes+":\n\ttouch ran\n"), 0o644))
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(repo)}},
		NodeSelector: map[string]string{wbv1.NodeLabel: node},
	}}))
	must(t, env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e"}}))
	must(t, env.Client.Create(ctx, makeProfile(ns, "make", []string{"-s"}, false)))
	eventually(t, 60*time.Second, "session Running", func() (bool, string) {
		var s wbv1.TerminalSession
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, &s))
		return s.Status.Phase == wbv1.SessionRunning, fmt.Sprintf("%+v", s.Status)
	})
	must(t, env.Client.Create(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "make", Argv: []string{"/usr/bin/make", "-s", targetProbes},
			Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 30, OutputBytes: outputCap}}))
	var c wbv1.TerminalCommand
	eventually(t, 60*time.Second, "command outcome", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c"}, &c))
		return wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions), fmt.Sprintf("%+v", c.Status)
	})
	if c.Status.Phase == wbv1.CommandSucceeded || c.Status.Refusal == nil || c.Status.Refusal.Code != wantCode {
		t.Fatalf("command on a node without the sandbox: phase %s refusal %+v, want refused with %s", c.Status.Phase, c.Status.Refusal, wantCode)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the command's side effect exists (%v): something ran outside the sandbox", err)
	}
}

package security

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/dpclient"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/proctest"
	"sensorium.dev/workbench/internal/test/testkit"
)

var must = testkit.Must

func ptr[T any](v T) *T { return &v }

var eventually = testkit.Eventually

func namespace(t testing.TB) string { return env.Namespace(t, "sec-") }

// Makefile targets, each the repository's code run by make.
const (
	targetProbes    = "probes"
	targetPTY       = "pty" // probes, then stay alive so the session's events can be read
	targetForkStorm = "forkstorm"
	targetMemStorm  = "memstorm"
	targetDaemon    = "daemon"
	targetFlood     = "flood"
)

// Storm sizes.
const (
	pidsLimit    = 64
	forkAttempts = 200
	memoryMiB    = 64
	memStormMiB  = 512
	floodBytes   = 50 << 20
	outputCap    = 1 << 20
)

// probeArgs are the probe's targets on this host: the agent's state dir, kubeconfig and
// pid, the host's listeners.
func probeArgs() string {
	return fmt.Sprintf("-state-dir %s -kubeconfig %s -agent-pid %d -tcp %s -unix %s -scratch .",
		stateDir, kubeconfig, os.Getpid(), tcpAddrs, hostSock)
}

// repository writes a workspace holding the probe and a Makefile, as a hostile
// repository would ship them. marker names the daemon for the host-side scan.
func repository(t testing.TB, dir, marker string) {
	t.Helper()
	bin, err := os.ReadFile(probeBin)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "probe"), bin, 0o755))
	mk := fmt.Sprintf(`PROBE_ARGS = %s
%s:
	./probe probes $(PROBE_ARGS)
%s:
	./probe probes $(PROBE_ARGS); exec ./probe sleep
%s:
	./probe forkstorm %d
%s:
	./probe memstorm %d
%s:
	./probe daemon %s
%s:
	./probe flood %d
`, probeArgs(), targetProbes, targetPTY, targetForkStorm, forkAttempts, targetMemStorm, memStormMiB, targetDaemon, marker, targetFlood, floodBytes)
	must(t, os.WriteFile(filepath.Join(dir, "Makefile"), []byte(mk), 0o644))
}

// workDir is a fresh repository inside the admitted root.
func workDir(t testing.TB, marker string) string {
	t.Helper()
	d, err := os.MkdirTemp(workspace, "repo-")
	must(t, err)
	must(t, os.Chmod(d, 0o755))
	repository(t, d, marker)
	return d
}

// makeProfile lets `make -s <target>` run for the targets above (and as a PTY program
// running target pty).
func makeProfile(ns, name string, fixed []string, pty bool) *wbv1.CommandProfile {
	p := &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/usr/bin/make", FixedArgs: fixed,
		AllowedArgPrefixes: []string{targetProbes, targetForkStorm, targetMemStorm, targetDaemon, targetFlood},
		AllowedRoots:       []string{"repo"},
		Env:                wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "LANG", Value: "C.UTF-8"}, {Name: "PATH", Value: "/usr/bin:/bin"}}},
		MaxTimeoutSeconds:  120, MaxOutputBytes: outputCap,
	}}
	if pty {
		p.Spec.AllowedArgPrefixes = nil
		p.Spec.PTY = "Allowed"
	}
	return p
}

type backendCase struct {
	name    string
	backend wbv1.BackendID
}

var backendCases = []backendCase{{"host-local", wbv1.BackendHostLocal}, {"fixture-copy", wbv1.BackendFixtureCopy}}

// eachBackend runs f as a subtest (named by the backend) on every backend of backendCases.
func eachBackend(t *testing.T, f func(t *testing.T, bc backendCase)) {
	t.Helper()
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) { f(t, bc) })
	}
}

// environment creates environment e over dir on backend (fixture-copy copies dir), with
// a structured session s and the make profiles, and waits until both are running.
func environment(t testing.TB, ns, dir string, backend wbv1.BackendID, res *wbv1.EnvironmentResources) {
	t.Helper()
	ctx := context.Background()
	createEnvironment(t, ns, dir, backend, res, nodeName)
	must(t, env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e"}}))
	must(t, env.Client.Create(ctx, makeProfile(ns, "make", []string{"-s"}, false)))
	must(t, env.Client.Create(ctx, makeProfile(ns, "make-pty", []string{"-s", targetPTY}, true)))
	waitReadyAndRunning(t, ns, "environment Ready and session Running")
}

// createEnvironment creates environment e over dir on backend (fixture-copy copies dir)
// on node.
func createEnvironment(t testing.TB, ns, dir string, backend wbv1.BackendID, res *wbv1.EnvironmentResources, node string) {
	t.Helper()
	ctx := context.Background()
	root := wbv1.EnvironmentRoot{Name: "repo", HostPath: ptr(dir)}
	if backend == wbv1.BackendFixtureCopy {
		root = wbv1.EnvironmentRoot{Name: "repo", Source: ptr(dir)}
	}
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: backend, Roots: []wbv1.EnvironmentRoot{root}, Resources: res,
		NodeSelector: map[string]string{wbv1.NodeLabel: node},
	}}))
}

// waitReadyAndRunning waits (60 s at most) until environment e is Ready and session s
// Running in ns; what names the wait.
func waitReadyAndRunning(t testing.TB, ns, what string) {
	t.Helper()
	eventually(t, 60*time.Second, what, func() (bool, string) {
		return kstate.ReadyAndRunning(t, env.Client, ns, "e", "s", nil)
	})
}

// runMake runs `make -s target` as a TerminalCommand and returns its final state and output.
func runMake(t testing.TB, ns, name, target string, timeout int64) (*wbv1.TerminalCommand, string) {
	t.Helper()
	return runSpec(t, ag, ns, name, wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "make", Argv: []string{"/usr/bin/make", "-s", target},
		Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: timeout, OutputBytes: outputCap})
}

// runSpec creates TerminalCommand ns/name with spec, waits for its outcome (its timeout
// plus 30 s) and returns the command and the output agent a recorded for it.
func runSpec(t testing.TB, a *agent.Agent, ns, name string, spec wbv1.TerminalCommandSpec) (*wbv1.TerminalCommand, string) {
	t.Helper()
	ctx := context.Background()
	must(t, env.Client.Create(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}))
	var c wbv1.TerminalCommand
	eventually(t, time.Duration(spec.TimeoutSeconds+30)*time.Second, "command "+name+" outcome", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c))
		return wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions), fmt.Sprintf("%+v", c.Status)
	})
	var s wbv1.TerminalSession
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: string(spec.SessionRef)}, &s))
	out := ""
	if c.Status.SeqTo > 0 {
		b, _, err := a.Output(string(s.UID), uint64(c.Status.SeqFrom), uint64(c.Status.SeqTo))
		must(t, err)
		out = string(b)
	}
	return &c, out
}

// probeLine is one line of the probe's report.
type probeLine struct {
	Probe  string `json:"probe"`
	Result string `json:"result"`
	Errno  string `json:"errno"`
	Detail string `json:"detail"`
}

// parseProbes reads the probe's JSON lines out of output (a PTY adds \r; make may add
// its own lines, which are not JSON and are ignored). done reports the final line.
func parseProbes(output string) (lines map[string]probeLine, done bool) {
	lines = map[string]probeLine{}
	for _, l := range strings.Split(output, "\n") {
		l = strings.TrimSpace(strings.TrimRight(l, "\r"))
		i := strings.Index(l, `{"probe":`) // a terminal may prefix its own bytes
		if i < 0 {
			continue
		}
		l = l[i:]
		var p probeLine
		if json.Unmarshal([]byte(l), &p) != nil || p.Probe == "" {
			continue
		}
		if p.Probe == "done" {
			done = true
			continue
		}
		lines[p.Probe] = p
	}
	return lines, done
}

// readPTY follows a PTY session's output through the node data plane's event stream (as
// an operator would) until the probe's final line appears, or the session ends.
func readPTY(t testing.TB, ns, session string) string {
	t.Helper()
	ctx := context.Background()
	endpoint, hc, err := nodeagenttest.DataPlane(ctx, env, nodeName)
	must(t, err)
	token, err := nodeagenttest.TokenFor(ctx, env, ns, "op-"+session, "workbench-operator")
	must(t, err)
	fctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	resp := dpclient.Client{Endpoint: endpoint, HTTP: hc}.Follow(t, fctx, token, ns, session, 0)
	evs := dpclient.DecodeEvents(t, resp.Body, func(evs []protocol.SessionEvent) bool {
		_, done := parseProbes(string(dpclient.Output(evs)))
		return done
	})
	return string(dpclient.Output(evs))
}

// agentRSS is the resident set of the agent's process (this test binary) in KiB.
func agentRSS(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:")), "%d", &kb); err != nil {
				t.Fatalf("VmRSS line %q: %v", l, err)
			}
			return kb
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// hostProcessesWith lists host processes whose command line holds marker.
var hostProcessesWith = proctest.WithArg

// hostCapability is this node's published host-local BackendCapability.
func hostCapability(t testing.TB) *wbv1.BackendCapability {
	t.Helper()
	var bc wbv1.BackendCapability
	eventually(t, 30*time.Second, "the node's host-local BackendCapability", func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Name: nodeName + "." + string(wbv1.BackendHostLocal)}, &bc)
		return err == nil && bc.Status.AttestedAt != nil, fmt.Sprint(err)
	})
	return &bc
}

// processSandboxCondition is the condition the node publishes on its host backends'
// capabilities when it establishes the process sandbox of issue 7 item 1.
const processSandboxCondition = "ProcessSandbox"

// requireProcessSandbox skips, naming the missing property, when this node does not attest
// the process sandbox (namespaces, no capabilities, seccomp, Landlock): without it the
// probes would only restate the gaps issue 7 lists.
func requireProcessSandbox(t *testing.T) {
	t.Helper()
	bc := hostCapability(t)
	for _, c := range bc.Status.Conditions {
		if c.Type != processSandboxCondition {
			continue
		}
		if c.Status != metav1.ConditionTrue {
			t.Skipf("this node cannot establish the process sandbox (%s=%s: %s); every start fails closed, so no probe can run", c.Type, c.Status, c.Message)
		}
		return
	}
	t.Skipf("missing property: BackendCapability %s attests no %s condition — the process sandbox of issue 7 item 1 (own user/PID/mount/UTS/IPC/net namespaces, no capabilities, seccomp) is not on this build", bc.Name, processSandboxCondition)
}

// requireEnforcement skips, naming the missing property, when this node does not enforce
// the resource class (resourceEnforcement of its host-local capability: per-command cgroups).
func requireEnforcement(t *testing.T, class string) {
	t.Helper()
	bc := hostCapability(t)
	for _, e := range bc.Spec.ResourceEnforcement {
		if e == class {
			return
		}
	}
	t.Skipf("missing property: BackendCapability %s does not enforce %s (resourceEnforcement %v) — the per-command cgroups of issue 7 item 1 are not on this build", bc.Name, class, bc.Spec.ResourceEnforcement)
}

// Package sources runs workspace sources (issue 28 item 1) end to end: the manager and one
// in-process node agent against a real API server; Environments whose roots come from a
// git commit served by the test over smart HTTP or file://, or from an OCI artifact in an
// in-process registry, materialized by the agent into fixture-copy.v1 managed copies. The
// test process's stderr (the agent's logs, at full verbosity) is captured so that a
// credential can be looked for in it.
package sources

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends/guestenv"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/testkit"
)

const nodeName = "node-src"

var (
	suite    *nodeagenttest.Suite
	env      *envtest.Env
	ag       *agent.Agent
	stateDir string
	repos    string               // file:// repositories live here (an allowed file dir)
	logs     testkit.LockedBuffer // fd 2 teed (teeStderr)
)

// teeStderr replaces fd 2 with a pipe whose reader copies into logs and the real stderr.
func teeStderr() {
	orig, err := unix.Dup(2)
	if err != nil {
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		return
	}
	if err := unix.Dup2(int(w.Fd()), 2); err != nil {
		return
	}
	out := os.NewFile(uintptr(orig), "stderr")
	go func() { _, _ = io.Copy(io.MultiWriter(&logs, out), r) }()
}

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper()                    // the agent re-executes this binary as its sandbox helper: before anything else
	guestenv.MaybeRunRelay()                     // and as the guest PTY relay of a VM session
	_ = os.Setenv("WORKBENCH_TEST_VERBOSE", "1") // every log line of the agent, to grep for credentials
	teeStderr()
	nodeagenttest.Main(m, nodeagenttest.Options{Name: "sources", Setup: func(s *nodeagenttest.Suite) error {
		suite, env, stateDir = s, s.Env, s.StateDir
		repos = filepath.Join(s.Dir, "repos")
		if err := os.MkdirAll(repos, 0o755); err != nil {
			return err
		}
		cfg := s.AgentConfig(nodeName)
		cfg.Sources = &agent.SourcesConfig{AllowedHosts: []string{"127.0.0.1"}, AllowedFileDirs: []string{repos}, AllowRefs: true, TimeoutSeconds: 60}
		var err error
		ag, err = s.StartAgent(cfg, agent.Options{})
		return err
	}})
}

var (
	must       = testkit.Must
	eventually = testkit.Eventually
)

func ptr[T any](v T) *T { return &v }

func namespace(t testing.TB) string { return env.Namespace(t, "src-") }

// sourcedEnvironment creates a fixture-copy.v1 Environment "e" whose root "repo" is root.
func sourcedEnvironment(t *testing.T, ns string, root wbv1.EnvironmentRoot) {
	t.Helper()
	root.Name = "repo"
	must(t, env.Client.Create(context.Background(), &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{root},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
	}}))
}

// waitEnvironment waits until Environment ns/e is Ready or Failed and returns it.
func waitEnvironment(t *testing.T, ns string) *wbv1.Environment {
	t.Helper()
	return kstate.Until(t, env.Client, 90*time.Second, "environment Ready or Failed", ns, "e", &wbv1.Environment{}, func(e *wbv1.Environment) bool {
		return e.Status.Phase == wbv1.EnvironmentReady || e.Status.Phase == wbv1.EnvironmentFailed
	})
}

func readyCondition(e *wbv1.Environment) metav1.Condition {
	for _, c := range e.Status.Conditions {
		if c.Type == wbv1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}

// wantFailedWith fails the test unless environment e failed with code: phase Failed, the
// Ready condition's message starting with the code, and its one root's reason the code.
func wantFailedWith(t *testing.T, e *wbv1.Environment, code actuation.Code) {
	t.Helper()
	cond := readyCondition(e)
	if e.Status.Phase != wbv1.EnvironmentFailed || !strings.HasPrefix(cond.Message, string(code)+":") {
		t.Fatalf("phase %s, Ready %+v: want Failed with %s", e.Status.Phase, cond, code)
	}
	if len(e.Status.Roots) != 1 || e.Status.Roots[0].Reason != string(code) {
		t.Fatalf("status.roots = %+v", e.Status.Roots)
	}
}

// eventsText is every event message and reason in ns.
func eventsText(t *testing.T, ns string) string {
	t.Helper()
	var b strings.Builder
	var ev eventsv1.EventList
	must(t, env.Client.List(context.Background(), &ev, client.InNamespace(ns)))
	for _, e := range ev.Items {
		fmt.Fprintf(&b, "%s %s %s\n", e.Reason, e.Note, e.Action)
	}
	var cv corev1.EventList
	must(t, env.Client.List(context.Background(), &cv, client.InNamespace(ns)))
	for _, e := range cv.Items {
		fmt.Fprintf(&b, "%s %s\n", e.Reason, e.Message)
	}
	return b.String()
}

// statusJSON is the Environment's whole status.
func statusJSON(e *wbv1.Environment) string {
	b, _ := json.Marshal(e.Status)
	return string(b)
}

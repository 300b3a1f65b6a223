// Package nodeagent runs the node agent against a real API server, with real PTYs and real
// processes: the manager (controllers + webhooks) and one agent acting as node identity
// workbench:node:<name>, bound to the workbench-node-agent ClusterRole.
package nodeagent

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/testkit"
)

const nodeName = "node-test"

// suiteStorageMiB is the suite agent's storage.maxMiB: room for 64 environment disks of
// the default 1 GiB, well above what the suite holds at once.
const suiteStorageMiB = 64 << 10

var (
	suite     *nodeagenttest.Suite
	env       *envtest.Env
	ag        *agent.Agent
	workspace string // admitted root "work"
	stateDir  string
)

func TestMain(m *testing.M) {
	nodeagenttest.Main(m, nodeagenttest.Options{Name: "nodeagent", Setup: func(s *nodeagenttest.Suite) error {
		suite, env, workspace, stateDir = s, s.Env, s.Workspace, s.StateDir
		var err error
		ag, err = startAgent()
		return err
	}})
}

func startAgent() (*agent.Agent, error) {
	cfg := suite.AgentConfig(nodeName)
	cfg.RecordRetentionSeconds = 2
	cfg.Caps = agent.Caps{Sessions: 64, SessionsPerEnvironment: 4}
	// A fixed reservation for environment disks, not the default half of the state
	// filesystem's free space: every fixture-copy.v1 environment the suite makes holds a
	// disk of storage.defaultDiskMiB (1 GiB) until the suite ends (its namespaces are never
	// deleted), some two dozen over a whole run, so the default made the suite fail with
	// storage-exhausted on a machine with less than ~20 GiB free (a large build cache).
	// The images are sparse: what the disks really take on the host is what is written to
	// them (their filesystems' metadata and the tests' small files), not this budget.
	cfg.Storage = &agent.StorageConfig{MaxMiB: suiteStorageMiB}
	cfg.QEMU, qemuSkip = nodeagenttest.QEMU()
	// git sources from file:// repositories the tests make inside the admitted workspace.
	cfg.Sources = &agent.SourcesConfig{AllowedFileDirs: []string{workspace}}
	return suite.StartAgent(cfg, agent.Options{})
}

func namespace(t testing.TB) string { return env.Namespace(t, "na-") }

var must = testkit.Must

func ptr[T any](v T) *T { return &v }

var eventually = testkit.Eventually

// workDir makes a fresh directory inside the admitted root for one test.
func workDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp(workspace, "t-")
	must(t, err)
	return d
}

// profile is a CommandProfile for exe with variable atoms under prefixes.
func profile(ns, name, exe string, fixed, prefixes []string, mut ...func(*wbv1.CommandProfileSpec)) *wbv1.CommandProfile {
	p := &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: exe, FixedArgs: fixed, AllowedArgPrefixes: prefixes, AllowedRoots: []string{"repo"},
		Env:               wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "LANG", Value: "C.UTF-8"}, {Name: "PATH", Value: "/usr/bin:/bin"}}},
		MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20,
	}}
	for _, m := range mut {
		m(&p.Spec)
	}
	return p
}

// readyWorkEnvironment makes a fresh namespace and work directory and readies an
// environment over it (readyEnvironment).
func readyWorkEnvironment(t *testing.T) (ns, dir string) {
	t.Helper()
	ns, dir = namespace(t), workDir(t)
	readyEnvironment(t, ns, dir)
	return ns, dir
}

// readyEnvironment creates a host-local environment over dir and a structured session, and
// waits until both are running on the node.
func readyEnvironment(t *testing.T, ns, dir string) {
	t.Helper()
	readyEnvironmentOn(t, ns, dir, nodeName)
}

// readyEnvironmentOn places the environment on node through a node selector.
func readyEnvironmentOn(t *testing.T, ns, dir, node string) {
	t.Helper()
	ctx := context.Background()
	must(t, env.Client.Create(ctx, hostEnvironment(ns, "e", dir, node)))
	must(t, env.Client.Create(ctx, session(ns, "s", "e")))
	eventually(t, 30*time.Second, "environment Ready and session Running", func() (bool, string) {
		return kstate.ReadyAndRunning(t, env.Client, ns, "e", "s", nil)
	})
}

func command(ns, name string, argv ...string) *wbv1.TerminalCommand {
	return &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "p", Argv: argv, Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 20}}
}

func waitFinal(t *testing.T, ns, name string) *wbv1.TerminalCommand {
	t.Helper()
	var c wbv1.TerminalCommand
	eventually(t, 60*time.Second, "command "+name+" outcome", func() (bool, string) {
		get(t, ns, name, &c)
		// The node records the outcome; the manager derives the phase from it a moment later.
		return wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions), fmt.Sprintf("%+v", c.Status)
	})
	return &c
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }

// askSessionClosed sets session ns/name's spec.desiredState to Closed, retrying conflicts
// with the agent's status writes.
func askSessionClosed(t *testing.T, ns, name string) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s wbv1.TerminalSession
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
			return err
		}
		s.Spec.DesiredState = wbv1.SessionDesiredClosed
		return env.Client.Update(context.Background(), &s)
	}))
}

// waitSessionClosedClean waits until session ns/name is Closed with CleanupComplete=True.
func waitSessionClosedClean(t *testing.T, ns, name, what string) {
	t.Helper()
	eventually(t, 30*time.Second, what, func() (bool, string) {
		var s wbv1.TerminalSession
		get(t, ns, name, &s)
		return s.Status.Phase == wbv1.SessionClosed && meta.IsStatusConditionTrue(s.Status.Conditions, wbv1.ConditionCleanupComplete),
			fmt.Sprintf("%+v", s.Status)
	})
}

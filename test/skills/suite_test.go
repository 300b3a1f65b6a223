// Package skills runs seed 004's loop end to end — record, crystallize, replay, prove,
// export and import — through a real API server (CRDs, webhooks, the manager's controllers)
// and a real node agent running real commands on real directories, and on a real VM guest
// where the guest image exists. The canonical fixtures live in test/fixtures/skills.
package skills

import (
	"bytes"
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/testkit"
)

const nodeName = "node-skills"

var (
	env       *envtest.Env
	workspace string // admitted root "work"
	stateDir  string // the agent's state directory
	qemuSkip  string
)

func TestMain(m *testing.M) {
	nodeagenttest.Main(m, nodeagenttest.Options{Name: "skills", Setup: func(s *nodeagenttest.Suite) error {
		env, workspace, stateDir = s.Env, s.Workspace, s.StateDir
		cfg := s.AgentConfig(nodeName)
		cfg.Caps = agent.Caps{Sessions: 64, SessionsPerEnvironment: 8}
		cfg.QEMU, qemuSkip = nodeagenttest.QEMU()
		_, err := s.StartAgent(cfg, agent.Options{})
		return err
	}})
}

func repoRoot() string { return envtest.RepoRoot() }

func namespace(t testing.TB) string { return env.Namespace(t, "sk-") }

var must = testkit.Must

func ptr[T any](v T) *T { return &v }

var eventually = testkit.Eventually

func get(t *testing.T, ns, name string, obj client.Object) {
	t.Helper()
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj))
}

var _ = wbv1.GroupVersion

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func applyImageManifest(t *testing.T) string {
	t.Helper()
	name, err := nodeagenttest.ApplyImageManifest(context.Background(), env)
	must(t, err)
	return name
}

package nodeagenttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/webhooks"
)

// These helpers run the node agent as its own process (the real binary), as a DaemonSet
// pod would: one process is one agent.

// BuildAgent builds cmd/node-agent into dir, with cmd/workbench-sandbox next to it as the
// image ships them (the agent uses a sibling helper: every command of the suites then
// starts through the deployed helper, static and without cgo, not through a re-executed
// agent), and returns the agent binary's path.
func BuildAgent(dir string) (string, error) {
	bin := filepath.Join(dir, "node-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "sensorium.dev/workbench/cmd/node-agent").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building node-agent: %w\n%s", err, out)
	}
	if err := BuildHelper(filepath.Join(dir, "workbench-sandbox")); err != nil {
		return "", err
	}
	return bin, nil
}

// BuildHelper builds cmd/workbench-sandbox to path as the image ships it (Dockerfile,
// hack/images): static, no cgo. A cgo build is dynamically linked and costs every command
// the loader and libc's start (~5 ms of CPU per helper), which the deployed node does not pay.
func BuildHelper(path string) error {
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", path, "sensorium.dev/workbench/cmd/workbench-sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building workbench-sandbox: %w\n%s", err, out)
	}
	return nil
}

// NodeKubeconfig adds the API server user of node's identity (workbench:node:<node>, the
// nodes group) and writes its kubeconfig to dir/kubeconfig, whose path it returns. The
// identity is not bound to any role: see BindNodeAgent.
func NodeKubeconfig(env *envtest.Env, node, dir string) (string, error) {
	user, err := env.Env.AddUser(crenvtest.User{Name: webhooks.NodeUserPrefix + node, Groups: []string{webhooks.NodeGroup}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding the user of node %s: %w", node, err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig of node %s: %w", node, err)
	}
	p := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(p, kc, 0o600); err != nil {
		return "", fmt.Errorf("writing the kubeconfig of node %s: %w", node, err)
	}
	return p, nil
}

// BindNodeAgent binds the workbench-node-agent ClusterRole to node's identity.
func BindNodeAgent(ctx context.Context, env *envtest.Env, node string) error {
	return env.Bind(ctx, "workbench-node-agent", webhooks.NodeUserPrefix+node, "")
}

//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
)

// kindUp is the kind provider (E2E_PROVIDER=kind): a kind cluster through the
// sigs.k8s.io/kind library with Docker, the image tarballs of hack/images loaded into its
// nodes (what `kind load image-archive` does), and config/default applied. skip says why
// it cannot run here (no container daemon).
func kindUp(root string) (down func() error, skip string, err error) {
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return nil, fmt.Sprintf("kind provider: `docker info` failed (%v: %s): kind needs a Docker daemon", err, first), nil
	}
	name := envOr("E2E_KIND_CLUSTER", "workbench-e2e")
	work, err := os.MkdirTemp("", "workbench-e2e-kind-")
	if err != nil {
		return nil, "", err
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	p := kindcluster.NewProvider(kindcluster.ProviderWithDocker())
	if err := p.Create(name, kindcluster.CreateWithKubeconfigPath(kubeconfig), kindcluster.CreateWithWaitForReady(5*time.Minute)); err != nil {
		return nil, "", fmt.Errorf("creating kind cluster %s: %w", name, err)
	}
	down = func() error {
		defer os.RemoveAll(work)
		if err := p.Delete(name, kubeconfig); err != nil {
			return fmt.Errorf("deleting kind cluster %s: %w", name, err)
		}
		return nil
	}
	fail := func(err error) (func() error, string, error) {
		_ = down()
		return nil, "", err
	}
	images := filepath.Join(work, "images")
	build := exec.Command("go", "run", "./hack/images", "-out", images)
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fail(fmt.Errorf("hack/images: %w", err))
	}
	nodes, err := p.ListInternalNodes(name)
	if err != nil || len(nodes) == 0 {
		return fail(fmt.Errorf("listing the nodes of kind cluster %s: %v", name, err))
	}
	tarballs, _ := filepath.Glob(filepath.Join(images, "*.tar"))
	for _, n := range nodes {
		for _, tb := range tarballs {
			f, err := os.Open(tb)
			if err != nil {
				return fail(err)
			}
			err = nodeutils.LoadImageArchive(n, f)
			f.Close()
			if err != nil {
				return fail(fmt.Errorf("loading %s into %s: %w", tb, n.String(), err))
			}
		}
	}
	cluster.kubeconfig = kubeconfig
	cluster.node = nodes[0].String()
	for _, args := range [][]string{
		{"apply", "--server-side", "-k", filepath.Join(root, "config", "default")},
		{"-n", systemNamespace, "rollout", "status", "deployment/" + managerName, "--timeout=300s"},
		{"-n", systemNamespace, "rollout", "status", "daemonset/" + agentName, "--timeout=300s"},
		{"wait", "--for=create", "workbenchnode/" + cluster.node, "--timeout=120s"},
	} {
		out, err := exec.Command(cluster.kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			return fail(fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out))
		}
	}
	return down, "", nil
}

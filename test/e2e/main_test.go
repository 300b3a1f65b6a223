//go:build e2e

// Package e2e runs Sensorium Workbench as a user installs it: the image tarballs of
// hack/images in a real node's container runtime, `kubectl apply -k config/default`, the
// manager Deployment and the node-agent DaemonSet on a real kubelet, and then the product
// through the Kubernetes API only.
//
// Providers (E2E_PROVIDER):
//
//	local (default)  hack/run-cluster.sh: etcd, kube-apiserver, kube-controller-manager,
//	                 kube-scheduler, containerd 2.1, kubelet and kube-proxy on this machine
//	                 (root); hack/down-cluster.sh afterwards, which fails if anything is
//	                 left behind.
//	kind             a kind cluster (sigs.k8s.io/kind, Docker) with the image tarballs
//	                 loaded into its nodes; skipped, saying why, where `docker info` fails.
//	                 The host checks (processes, workspaces) are skipped there.
//	existing         E2E_KUBECONFIG names a cluster where config/default is installed; the
//	                 host checks (processes) are skipped unless E2E_HOST_STATE is set.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// cluster is what the tests act on.
var cluster struct {
	kubeconfig string
	client     client.WithWatch
	node       string
	// hostState is the state directory of hack/run-cluster.sh (host paths of the node
	// agent live beneath host/); empty when the cluster is not on this machine.
	hostState string
	kubectl   string
	// skip, when set, is why every test skips.
	skip string
}

const (
	systemNamespace = "workbench-system"
	managerName     = "workbench-controller-manager"
	agentName       = "workbench-node-agent"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	root := repoRoot()
	k8sBin, err := exec.Command(filepath.Join(root, "hack", "build-control-plane.sh"), "path").Output()
	if err != nil {
		return 1, fmt.Errorf("hack/build-control-plane.sh path: %w", err)
	}
	cluster.kubectl = filepath.Join(strings.TrimSpace(string(k8sBin)), "kubectl")

	var down func() error
	switch provider := os.Getenv("E2E_PROVIDER"); provider {
	case "", "local":
		if reason := localUnavailable(); reason != "" {
			cluster.skip = "local provider: " + reason
			break
		}
		cluster.hostState = filepath.Join(root, ".cluster")
		cluster.kubeconfig = filepath.Join(cluster.hostState, "kubeconfig")
		cluster.node = envOr("CLUSTER_NODE_NAME", "workbench-node")
		up := exec.Command(filepath.Join(root, "hack", "run-cluster.sh"))
		up.Env = append(os.Environ(), "CLUSTER_SKIP_SAMPLES=1", "CLUSTER_NODE_NAME="+cluster.node)
		up.Stdout, up.Stderr = os.Stderr, os.Stderr
		if err := up.Run(); err != nil {
			return 1, fmt.Errorf("hack/run-cluster.sh: %w", err)
		}
		down = func() error {
			d := exec.Command(filepath.Join(root, "hack", "down-cluster.sh"))
			d.Env = append(os.Environ(), "CLUSTER_KEEP_LOGS="+envOr("E2E_LOGS", filepath.Join(os.TempDir(), "workbench-e2e-logs")))
			d.Stdout, d.Stderr = os.Stderr, os.Stderr
			if err := d.Run(); err != nil {
				return fmt.Errorf("hack/down-cluster.sh (it fails when something is left behind): %w", err)
			}
			return nil
		}
	case "kind":
		d, skip, err := kindUp(root)
		if err != nil {
			return 1, err
		}
		cluster.skip, down = skip, d
	case "existing":
		cluster.kubeconfig = os.Getenv("E2E_KUBECONFIG")
		cluster.hostState = os.Getenv("E2E_HOST_STATE")
		cluster.node = os.Getenv("E2E_NODE_NAME")
		if cluster.kubeconfig == "" || cluster.node == "" {
			return 1, fmt.Errorf("E2E_PROVIDER=existing needs E2E_KUBECONFIG and E2E_NODE_NAME")
		}
	default:
		return 1, fmt.Errorf("unknown E2E_PROVIDER %q (local, kind, existing)", provider)
	}

	if cluster.skip == "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", cluster.kubeconfig)
		if err != nil {
			return 1, fmt.Errorf("kubeconfig %s: %w", cluster.kubeconfig, err)
		}
		scheme := kruntime.NewScheme()
		utilruntime.Must(clientgoscheme.AddToScheme(scheme))
		utilruntime.Must(wbv1.AddToScheme(scheme))
		if cluster.client, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
			return 1, fmt.Errorf("client: %w", err)
		}
	}
	code := m.Run()
	if down != nil {
		if err := down(); err != nil {
			return 1, err
		}
	}
	return code, nil
}

// localUnavailable says why this machine cannot run the local single-node cluster.
func localUnavailable() string {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return "needs linux/amd64, this is " + runtime.GOOS + "/" + runtime.GOARCH
	}
	if os.Geteuid() != 0 {
		return "needs root (kubelet, containerd, CNI)"
	}
	if os.Getenv("E2E_SKIP_LOCAL") != "" {
		return "E2E_SKIP_LOCAL is set"
	}
	return ""
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// needCluster skips the test with the exact reason when no cluster is available.
func needCluster(t *testing.T) context.Context {
	t.Helper()
	if cluster.skip != "" {
		t.Skip(cluster.skip)
	}
	return context.Background()
}

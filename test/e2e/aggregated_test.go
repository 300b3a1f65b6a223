//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cliBinary builds kubectl-workbench once per run.
var cliBinary = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(os.TempDir(), fmt.Sprintf("e2e-kubectl-workbench-%d", os.Getpid()))
	build := exec.Command("go", "build", "-o", bin, "./cmd/kubectl-workbench")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building kubectl-workbench: %v\n%s", err, out)
	}
	return bin, nil
})

// workbenchCLI builds kubectl-workbench once per run.
func workbenchCLI(t *testing.T) string {
	t.Helper()
	bin, err := cliBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// workbench runs kubectl-workbench against the cluster and returns its stdout+stderr and error.
func workbench(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c := exec.Command(workbenchCLI(t), append([]string{"--kubeconfig", cluster.kubeconfig}, args...)...)
	c.Dir = repoRoot()
	out, err := c.CombinedOutput()
	return string(out), err
}

// TestAggregatedAPIOutput: the aggregated API (workbench-apiserver, registered with an
// APIService behind kube-apiserver's front proxy) serves a command's output on the real
// node: `kubectl workbench run` creates a TerminalCommand and streams its output through
// terminalcommands/output, which kube-apiserver proxies to workbench-apiserver, which reads
// it from the node agent's data plane in the DaemonSet pod (mTLS, forwarded user).
func TestAggregatedAPIOutput(t *testing.T) {
	ctx := needCluster(t)
	var svc corev1.Service
	must(t, cluster.client.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "workbench-apiserver"}, &svc))
	raw := kubectl(t, "get", "apiservice", "v1alpha1.subresources.workbench.sensorium.dev", "-o", "jsonpath={.status.conditions[?(@.type==\"Available\")].status}")
	if raw != "True" {
		t.Fatalf("APIService not Available: %q", raw)
	}
	ns := "e2e-aggregated"
	readyNamespace(ctx, t, ns)
	must(t, cluster.client.Create(ctx, execProfile(ns, "echo", "/usr/bin/echo", "through-", "/usr/bin:/bin")))
	workbenchCLI(t) // built before the clock starts
	start := time.Now()
	out, err := workbench(t, "-n", ns, "run", "-e", "e", "-p", "echo", "--session", "s", "--", "/usr/bin/echo", "through-the-aggregated-api")
	if err != nil {
		t.Fatalf("kubectl workbench run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "through-the-aggregated-api") {
		t.Fatalf("kubectl workbench run printed %q, want the command's output", out)
	}
	t.Logf("kubectl workbench run through the aggregated API: %s, output %q", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
}

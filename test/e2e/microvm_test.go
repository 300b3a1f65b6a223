//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/proctest"
)

// vmAvailable says why the cluster's node agent offers no qemu-microvm.v1 ("" when it does):
// hack/run-cluster.sh enables it when the node has QEMU and bin/guest/ the guest image.
func vmAvailable(ctx context.Context, t *testing.T) string {
	t.Helper()
	var bc wbv1.BackendCapability
	err := cluster.client.Get(ctx, client.ObjectKey{Name: cluster.node + ".qemu-microvm.v1"}, &bc)
	if apierrors.IsNotFound(err) {
		return "the node agent publishes no qemu-microvm.v1 capability (run-cluster's CLUSTER_VMS was off, or the node has no QEMU or guest image: see its log)"
	}
	must(t, err)
	return ""
}

// vmImage registers the guest image's ImageManifest (bin/guest/imagemanifest.yaml, as
// run-cluster registers it in default) in namespace ns: environments name it from their own.
func vmImage(t *testing.T, ns string) {
	t.Helper()
	kubectl(t, "apply", "--server-side", "-n", ns, "-f", filepath.Join(repoRoot(), "bin", "guest", "imagemanifest.yaml"))
}

// vmReady waits until the VM environment ns/name is Ready, failing at once when it fails.
func vmReady(ctx context.Context, t *testing.T, ns, name string, env *wbv1.Environment, ok func(*wbv1.Environment) bool) {
	t.Helper()
	eventually(t, 4*time.Minute, "the VM environment "+name+" Ready", func() (bool, string) {
		must(t, cluster.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, env))
		if env.Status.Phase == wbv1.EnvironmentFailed {
			t.Fatalf("the VM environment failed: %+v", env.Status)
		}
		return env.Status.Phase == wbv1.EnvironmentReady && (ok == nil || ok(env)), fmt.Sprintf("%+v", env.Status)
	})
}

func vmEnvironment(ns, name string) *wbv1.Environment {
	return &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendID("qemu-microvm.v1"), ImageRef: ptrTo("workbench-guest-x86-64"),
		Roots:        []wbv1.EnvironmentRoot{{Name: "repo"}},
		NodeSelector: map[string]string{wbv1.NodeLabel: cluster.node},
	}}
}

func ptrTo[T any](v T) *T { return &v }

// qemuProcesses lists the host pids of QEMU processes holding a descriptor whose path
// mentions s (the VM directory, named by the environment's UID, reaches QEMU as fd 5).
func qemuProcesses(s string) []int {
	return proctest.Matching(func(pid int, cmdline []byte) bool {
		if !strings.HasSuffix(strings.SplitN(string(cmdline), "\x00", 2)[0], "qemu-system-x86_64") {
			return false
		}
		dir := proctest.Path(pid, "fd")
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.Contains(l, s) {
				return true
			}
		}
		return false
	})
}

// TestMicroVMInDaemonSetPod: a qemu-microvm.v1 Environment boots inside the node-agent
// DaemonSet pod (the node's QEMU through the pod's read-only /usr, the guest image through a
// read-only hostPath; TCG here), a command runs in the guest and its output — the guest
// kernel's release, not the host's — is read through `kubectl workbench`; QEMU runs as the
// unprivileged VM user; deleting the namespace stops the VM.
func TestMicroVMInDaemonSetPod(t *testing.T) {
	ctx := needCluster(t)
	if why := vmAvailable(ctx, t); why != "" {
		t.Skip(why)
	}
	ns := "e2e-microvm"
	testNamespaceDeletedAtEnd(ctx, t, ns)
	vmImage(t, ns)
	start := time.Now()
	must(t, cluster.client.Create(ctx, vmEnvironment(ns, "vm")))
	var env wbv1.Environment
	vmReady(ctx, t, ns, "vm", &env, nil)
	booted := time.Since(start)
	var bc wbv1.BackendCapability
	must(t, cluster.client.Get(ctx, client.ObjectKey{Name: cluster.node + ".qemu-microvm.v1"}, &bc))
	t.Logf("VM environment Ready in %s inside the DaemonSet pod (isolation %s)", booted.Round(time.Millisecond), bc.Spec.IsolationClass)
	if cluster.hostState != "" {
		pids := qemuProcesses(string(env.UID))
		if len(pids) != 1 {
			t.Fatalf("want one QEMU process of environment %s on the host, found %v", env.UID, pids)
		}
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pids[0]))
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pids[0]))
		uid := ""
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "Uid:") {
				uid = strings.Fields(l)[1]
			}
		}
		if uid == "0" || uid == "" {
			t.Fatalf("QEMU runs as uid %q: it must run as the unprivileged VM user", uid)
		}
		t.Logf("QEMU pid %d uid %s, cgroups:\n%s", pids[0], uid, cg)
	}
	must(t, cluster.client.Create(ctx, execProfile(ns, "uname", "/bin/uname", "-r", "/bin:/sbin")))
	workbenchCLI(t) // built before the clock starts
	ran := time.Now()
	out, err := workbench(t, "-n", ns, "run", "-e", "vm", "-p", "uname", "--", "/bin/uname", "-r")
	t.Logf("kubectl workbench run -- /bin/uname -r in the guest: %s", time.Since(ran).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("kubectl workbench run in the guest: %v\n%s", err, out)
	}
	host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	guest := strings.TrimSpace(out)
	if !strings.Contains(guest, "6.1.") || (len(host) > 0 && strings.Contains(guest, strings.TrimSpace(string(host)))) {
		t.Fatalf("uname -r in the guest printed %q (host kernel %q): want the guest image's 6.1 kernel", guest, strings.TrimSpace(string(host)))
	}
	t.Logf("guest kernel %q (host %q)", guest, strings.TrimSpace(string(host)))

	// The environment first, so a teardown that does not finish says why.
	if out, err := exec.Command(cluster.kubectl, "--kubeconfig", cluster.kubeconfig, "-n", ns, "delete", "environment", "vm", "--wait=true", "--timeout=150s").CombinedOutput(); err != nil {
		var e wbv1.Environment
		_ = cluster.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vm"}, &e)
		logs, _ := exec.Command(cluster.kubectl, "--kubeconfig", cluster.kubeconfig, "-n", systemNamespace, "logs", "daemonset/"+agentName, "--tail=60").CombinedOutput()
		left, _ := exec.Command(cluster.kubectl, "--kubeconfig", cluster.kubeconfig, "-n", ns, "get", "workbench", "-o", "wide").CombinedOutput()
		t.Fatalf("deleting the VM environment: %v\n%s\nfinalizers %v status %+v\nleft in the namespace:\n%s\nnode agent log:\n%s", err, out, e.Finalizers, e.Status, left, logs)
	}
	kubectl(t, "delete", "namespace", ns, "--wait=true", "--timeout=180s")
	if cluster.hostState != "" {
		eventually(t, time.Minute, "no QEMU of the deleted environment", func() (bool, string) {
			left := qemuProcesses(string(env.UID))
			return len(left) == 0, fmt.Sprint(left)
		})
	}
}

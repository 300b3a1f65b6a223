//go:build e2e

package e2e

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/kstate"
)

// TestNodeDrain: `kubectl drain` of the node (it runs last: the drain evicts the manager and
// the aggregated API server, which on a one-node cluster wait Pending until the uncordon).
// The node agent's DaemonSet pod stays and drains the node itself: the running command is
// interrupted (no process left on the host) and, once the manager is back, recorded
// Failed/interrupted; the open session Failed/interrupted; the VM environment (where VMs run)
// drained and its QEMU gone. `kubectl uncordon` restores: the manager and the API server
// come back, the WorkbenchNode reports Draining=False, the environments are Ready again
// (the VM boots anew) and a new command runs.
func TestNodeDrain(t *testing.T) {
	ctx := needCluster(t)
	ns := "e2e-drain"
	readyNamespace(ctx, t, ns)
	startSleep(ctx, t, ns, "308.75")
	withVM := vmAvailable(ctx, t) == ""
	var vm wbv1.Environment
	var qemuBefore []int
	if withVM {
		vmImage(t, ns)
		must(t, cluster.client.Create(ctx, vmEnvironment(ns, "vm")))
		vmReady(ctx, t, ns, "vm", &vm, nil)
		if cluster.hostState != "" {
			if qemuBefore = qemuProcesses(string(vm.UID)); len(qemuBefore) != 1 {
				t.Fatalf("want one QEMU process of the VM environment before the drain, found %v", qemuBefore)
			}
		}
	} else {
		t.Logf("no VM environment in the drain: %s", vmAvailable(ctx, t))
	}

	start := time.Now()
	drained := false
	t.Cleanup(func() {
		if drained {
			_ = exec.Command(cluster.kubectl, "--kubeconfig", cluster.kubeconfig, "uncordon", cluster.node).Run()
		}
	})
	drained = true
	kubectl(t, "drain", cluster.node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s")
	t.Logf("kubectl drain returned after %s", time.Since(start).Round(time.Millisecond))
	if cluster.hostState != "" {
		eventually(t, 2*time.Minute, "the drained node's command and VM processes gone from the host", func() (bool, string) {
			left := hostProcesses("/usr/bin/sleep", "308.75")
			if withVM {
				left = append(left, qemuProcesses(string(vm.UID))...)
			}
			return len(left) == 0, fmt.Sprint(left)
		})
	}
	if p, states := agentPod(ctx, t); p == nil {
		t.Fatalf("the node-agent DaemonSet pod must stay through a drain: %s", states)
	}
	drainedIn := time.Since(start)

	kubectl(t, "uncordon", cluster.node)
	drained = false
	kubectl(t, "-n", systemNamespace, "rollout", "status", "deployment/"+managerName, "--timeout=300s")
	kubectl(t, "-n", systemNamespace, "rollout", "status", "deployment/workbench-apiserver", "--timeout=300s")
	waitInterrupted(t, 3*time.Minute, "the drained command's recorded outcome", ns, "long")
	var s wbv1.TerminalSession
	eventually(t, 2*time.Minute, "the drained session's outcome", func() (bool, string) {
		must(t, cluster.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, &s))
		return s.Status.Phase == wbv1.SessionFailed && s.Status.Refusal != nil && s.Status.Refusal.Code == "interrupted", fmt.Sprintf("%+v", s.Status)
	})
	eventually(t, 2*time.Minute, "WorkbenchNode Draining=False after uncordon", func() (bool, string) {
		var wn wbv1.WorkbenchNode
		must(t, cluster.client.Get(ctx, client.ObjectKey{Name: cluster.node}, &wn))
		d := meta.FindStatusCondition(wn.Status.Conditions, "Draining")
		return d != nil && d.Status == metav1.ConditionFalse, fmt.Sprintf("%+v", wn.Status.Conditions)
	})
	eventually(t, 4*time.Minute, "the environments Ready again", func() (bool, string) {
		var e wbv1.Environment
		must(t, cluster.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e"}, &e))
		ok := e.Status.Phase == wbv1.EnvironmentReady
		if withVM {
			must(t, cluster.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vm"}, &vm))
			ok = ok && vm.Status.Phase == wbv1.EnvironmentReady
			if cluster.hostState != "" {
				// A new boot: one QEMU again, not the one the drain stopped.
				now := qemuProcesses(string(vm.UID))
				ok = ok && len(now) == 1 && now[0] != qemuBefore[0]
			}
		}
		return ok, fmt.Sprintf("host-local %+v; vm %+v", e.Status.Phase, vm.Status)
	})
	must(t, cluster.client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "after", Namespace: ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e"}}))
	after := sleepCommand(ns, "after", "30")
	after.Spec.SessionRef, after.Spec.TimeoutSeconds = "after", 1
	must(t, cluster.client.Create(ctx, after))
	kstate.Until(t, cluster.client, 2*time.Minute, "a command after uncordon runs (and times out as asked)", ns, "after", &wbv1.TerminalCommand{},
		func(c *wbv1.TerminalCommand) bool { return c.Status.Phase == wbv1.CommandTimedOut })
	t.Logf("drain: processes gone %s after kubectl drain began; restored after uncordon in %s", drainedIn.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond)-drainedIn.Round(time.Millisecond))
}

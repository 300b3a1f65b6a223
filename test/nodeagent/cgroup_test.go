package nodeagent

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"

	"sensorium.dev/workbench/internal/test/kstate"
)

// TestCommandCgroupLimitsAndTeardown: a command of an Environment with resources.pids 32
// runs in a cgroup of that limit. Its fork storm is refused inside the cgroup, the
// sleepers it left and a setsid'd daemon are killed with the cgroup, the outcome says
// both, and the node keeps serving.
func TestCommandCgroupLimitsAndTeardown(t *testing.T) {
	ctx := context.Background()
	// As cmd/node-agent does, the (in-process) agent is a child subreaper for this test:
	// orphans of a command are re-parented to it, so it reaps them and confirms the
	// command's process group gone. Only for this test: TestCrashRecovery needs the
	// orphans of a killed agent process to go to init.
	must(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	ns := namespace(t)
	dir := workDir(t)
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(dir)}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
		Resources:    &wbv1.EnvironmentResources{PIDs: ptr(int32(32))},
	}}))
	must(t, env.Client.Create(ctx, session(ns, "s", "e")))
	// The program: a setsid'd daemon, then 200 background sleepers (testdata/forkstorm).
	storm := filepath.Join(dir, "forkstorm")
	if out, err := exec.Command("go", "build", "-o", storm, "./testdata/forkstorm").CombinedOutput(); err != nil {
		t.Fatalf("go build testdata/forkstorm: %v\n%s", err, out)
	}
	must(t, env.Client.Create(ctx, profile(ns, "p", storm, nil, []string{"200"})))
	must(t, env.Client.Create(ctx, command(ns, "storm", storm, "200")))
	c := waitFinal(t, ns, "storm")
	msg := conditionMessage(c, wbv1.ConditionCompleted)
	t.Logf("outcome %s: %s; output %q", c.Status.Phase, msg, output(t, ns, c))
	var started, refused int
	if _, err := fmt.Sscanf(output(t, ns, c), "started=%d refused=%d", &started, &refused); err != nil || c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("storm: %v, status %+v", err, c.Status)
	}
	if started+refused != 200 || refused < 200-32 {
		t.Fatalf("started %d, refused %d: want at least %d refused at pids 32", started, refused, 200-32)
	}
	if !strings.Contains(msg, "fork(s) refused at the cgroup pids limit of 32") {
		t.Fatalf("the outcome does not report the refused forks: %q", msg)
	}
	if !strings.Contains(msg, "process(es) left in the cgroup") || !strings.Contains(msg, "(sleep)") {
		t.Fatalf("the outcome does not report what the teardown killed: %q", msg)
	}
	if strings.Contains(msg, "cleanup incomplete") || strings.Contains(msg, "NOT confirmed empty") {
		t.Fatalf("teardown incomplete: %q", msg)
	}
	// The daemon and every sleeper were killed with the cgroup: the teardown found them all.
	if !strings.Contains(msg, fmt.Sprintf("killed %d process(es) left in the cgroup", started+1)) {
		t.Fatalf("the outcome does not report %d killed processes: %q", started+1, msg)
	}
	if c := runProfiled(t, ns, "s", "after", 0, "/bin/echo", "alive"); c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("the next command: %+v", c.Status)
	}
}

// TestEnvironmentDiskLimitRefused: resources.diskMiB is not enforced on host-local (its
// roots are the operator's own directories; fixture-copy.v1 enforces it, test/security's
// TestDiskFlood*), so the Environment is refused (resource-not-enforced), never silently
// run without it.
func TestEnvironmentDiskLimitRefused(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(workDir(t))}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
		Resources:    &wbv1.EnvironmentResources{DiskMiB: ptr(int32(64))},
	}}))
	eventually(t, 30*time.Second, "environment refused with resource-not-enforced", func() (bool, string) {
		return kstate.EnvironmentNotReady(t, env.Client, ns, "e", func(m string) bool { return strings.HasPrefix(m, "resource-not-enforced: resources.diskMiB") })
	})
}

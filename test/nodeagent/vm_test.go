package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/dpclient"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/proctest"
)

// qemuSkip says why the qemu-microvm.v1 tests skip ("" when the suite's agent runs the
// backend).
var qemuSkip = "the suite's agent was not started"

func repoRoot() string { return envtest.RepoRoot() }

func requireQEMU(t *testing.T) {
	t.Helper()
	if qemuSkip != "" {
		t.Skip(qemuSkip)
	}
}

// applyImageManifest applies the guest's ImageManifest and returns its name.
func applyImageManifest(t *testing.T) string {
	t.Helper()
	name, err := nodeagenttest.ApplyImageManifest(context.Background(), env)
	must(t, err)
	return name
}

// smallMicroVM is Environment ns/name of backend qemu-microvm.v1 on this test's node: guest
// image image, one root repo, 1 vCPU and 512 MiB; mut (when not nil) changes its spec.
func smallMicroVM(ns, name, image string, mut func(*wbv1.EnvironmentSpec)) *wbv1.Environment {
	e := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendQEMUMicroVM, Roots: []wbv1.EnvironmentRoot{{Name: "repo"}}, ImageRef: ptr(image),
		Resources:    &wbv1.EnvironmentResources{VCPUs: ptr(int32(1)), MemoryMiB: ptr(int32(512))},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
	}}
	if mut != nil {
		mut(&e.Spec)
	}
	return e
}

// vmProcesses lists the QEMU and vhost-device-vsock processes of one environment's VM
// directory (by executable name and the directory in their command line).
func vmProcesses(t *testing.T, envUID string) []string {
	t.Helper()
	return vmProcessesIn(t, stateDir, envUID)
}

func vmProcessesIn(t *testing.T, state, envUID string) []string {
	t.Helper()
	dir := filepath.Join(state, "vms", envUID) + "/"
	pids, err := proctest.Pids()
	must(t, err)
	var out []string
	for _, pid := range pids {
		exe, _ := os.Readlink(proctest.Path(pid, "exe"))
		base := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
		if base != "qemu-system-x86_64" && base != "vhost-device-vsock" {
			continue
		}
		// The confined VMM processes reach their directory through a descriptor; the
		// launch names it in their environment.
		cmd, _ := os.ReadFile(proctest.Path(pid, "cmdline"))
		env, _ := os.ReadFile(proctest.Path(pid, "environ"))
		if bytes.Contains(cmd, []byte(dir)) || bytes.Contains(append([]byte{0}, env...), []byte("\x00WORKBENCH_VM_DIR="+strings.TrimSuffix(dir, "/")+"\x00")) {
			out = append(out, strconv.Itoa(pid)+" "+base)
		}
	}
	return out
}

// TestQEMUMicroVMEnvironment: an Environment of backend qemu-microvm.v1 requiring
// isolationClass emulated-vm is placed on this TCG node, boots a real guest and becomes
// Ready; TerminalCommands run inside the guest (its kernel, only lo); deleting the
// environment leaves no QEMU or vsock device process and no socket.
func TestQEMUMicroVMEnvironment(t *testing.T) {
	requireQEMU(t)
	ctx := context.Background()
	ns := namespace(t)
	image := applyImageManifest(t)
	eventually(t, 60*time.Second, "the node's qemu-microvm.v1 capability", func() (bool, string) {
		var c wbv1.BackendCapability
		if err := env.Client.Get(ctx, client.ObjectKey{Name: nodeName + ".qemu-microvm.v1"}, &c); err != nil {
			return false, err.Error()
		}
		return c.Spec.IsolationClass == "emulated-vm" && c.Spec.HostFilesystemSharing == "denied", fmt.Sprintf("%+v", c.Spec)
	})
	iso := wbv1.IsolationClass("emulated-vm")
	start := time.Now()
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendQEMUMicroVM, Requirements: &wbv1.EnvironmentRequirements{IsolationClass: &iso},
		Roots: []wbv1.EnvironmentRoot{{Name: "repo"}}, ImageRef: ptr(image),
		Resources:    &wbv1.EnvironmentResources{VCPUs: ptr(int32(1)), MemoryMiB: ptr(int32(512))},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
	}}))
	must(t, env.Client.Create(ctx, session(ns, "s", "vm")))
	var e wbv1.Environment
	var envReady time.Duration
	eventually(t, 180*time.Second, "VM environment Ready and session Running", func() (bool, string) {
		ok, msg := kstate.ReadyAndRunning(t, env.Client, ns, "vm", "s", &e)
		if envReady == 0 && e.Status.Phase == wbv1.EnvironmentReady {
			envReady = time.Since(start)
		}
		return ok, msg
	})
	t.Logf("through the API server: Environment create → Ready %v; → session Running %v", envReady.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if e.Status.SourceGeneration != 1 || e.Status.NodeName != nodeName {
		t.Fatalf("status %+v", e.Status)
	}
	if procs := vmProcesses(t, string(e.UID)); len(procs) != 2 {
		t.Fatalf("VM processes: %v", procs)
	}

	// A command inside the guest: its kernel answers, not the host's. The profiles name the
	// image's busybox applet links (/bin/uname → busybox): the actuation core refuses a
	// multi-call binary itself (busybox) as a command launcher, whatever its fixed args.
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/uname", nil, []string{"-a"})))
	must(t, env.Client.Create(ctx, command(ns, "uname", "/bin/uname", "-a")))
	c := waitFinal(t, ns, "uname")
	if c.Status.Phase != wbv1.CommandSucceeded || c.Status.ExitCode == nil || *c.Status.ExitCode != 0 {
		t.Fatalf("uname: %+v", c.Status)
	}
	out := output(t, ns, c)
	host, _ := exec.Command("uname", "-r").Output()
	t.Logf("uname -a in the guest: %q (host kernel %s)", out, strings.TrimSpace(string(host)))
	if !strings.HasPrefix(out, "Linux workbench-guest ") || strings.Contains(out, strings.TrimSpace(string(host))) {
		t.Fatalf("uname output %q is not the guest's", out)
	}

	// Inside the guest only the loopback interface exists.
	if c := runProfiled(t, ns, "s", "net", 0, "/bin/ls", "/sys/class/net"); c.Status.Phase != wbv1.CommandSucceeded || strings.Join(strings.Fields(output(t, ns, c)), ",") != "lo" {
		t.Fatalf("/sys/class/net: %+v %q", c.Status, output(t, ns, c))
	}

	// The command's working directory is the root inside the guest.
	if c := runProfiled(t, ns, "s", "pwd", 0, "/bin/realpath", "."); c.Status.Phase != wbv1.CommandSucceeded || output(t, ns, c) != "/workspace/repo\n" {
		t.Fatalf("cwd: %+v %q", c.Status, output(t, ns, c))
	}

	// An interactive session with a shell profile runs its program on a PTY in the guest:
	// operator input reaches it through the data plane and its echo comes back.
	catPTYSession(t, ns, "vm", "/bin/cat", 60*time.Second)
	// The guest terminal echoes the line, then cat prints it: twice.
	opToken := tokenFor(t, ns, "op", "workbench-operator")
	dataPlane(t).Echo(t, opToken, opToken, ns, "pty", "hello guest", 2, 30*time.Second)
	askSessionClosed(t, ns, "pty")
	waitSessionClosedClean(t, ns, "pty", "the guest PTY session closed with cleanup complete")

	// Deleting the environment tears the VM down: no process, no socket, no directory.
	must(t, env.Client.Delete(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns}}))
	must(t, env.Client.Delete(ctx, &e))
	dir := filepath.Join(stateDir, "vms", string(e.UID))
	eventually(t, 90*time.Second, "VM torn down", func() (bool, string) {
		procs := vmProcesses(t, string(e.UID))
		_, err := os.Lstat(dir)
		return len(procs) == 0 && os.IsNotExist(err), fmt.Sprintf("processes %v, dir: %v", procs, err)
	})
}

// TestQEMUHardwareVMNeverPlacedOnTCG: this node's qemu-microvm.v1 runs under TCG and
// attests emulated-vm; an Environment requiring hardware-vm is not placed on it.
func TestQEMUHardwareVMNeverPlacedOnTCG(t *testing.T) {
	requireQEMU(t)
	ctx := context.Background()
	ns := namespace(t)
	image := applyImageManifest(t)
	iso := wbv1.IsolationClass("hardware-vm")
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "hw", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendQEMUMicroVM, Requirements: &wbv1.EnvironmentRequirements{IsolationClass: &iso},
		Roots: []wbv1.EnvironmentRoot{{Name: "repo"}}, ImageRef: ptr(image),
	}}))
	var e wbv1.Environment
	eventually(t, 60*time.Second, "Scheduled=False naming isolationClass", func() (bool, string) {
		get(t, ns, "hw", &e)
		for _, c := range e.Status.Conditions {
			if c.Type == wbv1.ConditionScheduled && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "isolationClass=hardware-vm") {
				return true, c.Message
			}
		}
		return false, fmt.Sprintf("%+v", e.Status)
	})
	if e.Status.NodeName != "" || e.Labels[wbv1.NodeLabel] != "" {
		t.Fatalf("placed: %+v", e.Status)
	}
	found := false
	for _, u := range e.Status.Unmet {
		found = found || (u.Dimension == "isolationClass" && u.Want == "hardware-vm")
	}
	if !found {
		t.Fatalf("unmet %+v", e.Status.Unmet)
	}
	for _, c := range e.Status.Conditions {
		if c.Type == wbv1.ConditionScheduled {
			t.Logf("Scheduled=%s: %s", c.Status, c.Message)
		}
	}
}

// TestQEMUAgentCrash kills the node agent binary with SIGKILL while a command runs in a
// guest, and again while another guest boots, restarting it each time: the running VM is
// adopted (same QEMU process, same generation) and keeps serving; the interrupted command
// ends Failed/interrupted, never re-run; the VM caught mid-boot is quarantined and
// replaced by a new boot with the next generation; no QEMU or vsock device process is
// orphaned.
func TestQEMUAgentCrash(t *testing.T) {
	requireQEMU(t)
	const vmNode = "node-vmcrash"
	ctx := context.Background()
	bin := buildAgent(t)
	kubeconfig := boundNodeKubeconfig(t, vmNode)
	state, err := os.MkdirTemp("", "wb-vmcrash-") // short: VM socket paths are bounded
	must(t, err)
	defer func() { _ = os.RemoveAll(state) }()
	defer func() { must(t, nodeagenttest.Release(agent.Config{NodeName: vmNode, StateDir: state})) }()
	q, _ := nodeagenttest.QEMU()
	config := filepath.Join(t.TempDir(), "node-agent.yaml")
	must(t, os.WriteFile(config, []byte(fmt.Sprintf("nodeName: %s\nstateDir: %s\nheartbeatSeconds: 2\nqemu:\n  enabled: true\n  imageDir: %s\n  accel: tcg\n",
		vmNode, state, q.ImageDir)), 0o600))
	image := applyImageManifest(t)
	ns := namespace(t)
	createVM := func(name string) *wbv1.Environment {
		e := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendQEMUMicroVM, Roots: []wbv1.EnvironmentRoot{{Name: "repo"}}, ImageRef: ptr(image),
			NodeSelector: map[string]string{wbv1.NodeLabel: vmNode}}}
		must(t, env.Client.Create(ctx, e))
		return e
	}
	readyEnv := func(name string, a *agentProcess) *wbv1.Environment {
		var e wbv1.Environment
		eventually(t, 120*time.Second, "environment "+name+" Ready", func() (bool, string) {
			get(t, ns, name, &e)
			return e.Status.Phase == wbv1.EnvironmentReady, fmt.Sprintf("%+v\nagent log:\n%s", e.Status, a.LogTail())
		})
		return &e
	}

	first := startAgentProcess(t, bin, kubeconfig, config)
	createVM("vm")
	must(t, env.Client.Create(ctx, session(ns, "s", "vm")))
	vm := readyEnv("vm", first)
	procs := vmProcessesIn(t, state, string(vm.UID))
	if len(procs) != 2 {
		t.Fatalf("VM processes: %v", procs)
	}
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/sleep", nil, []string{"30"})))
	must(t, env.Client.Create(ctx, command(ns, "long", "/bin/sleep", "30")))
	eventually(t, 60*time.Second, "the guest command to run", func() (bool, string) {
		var c wbv1.TerminalCommand
		get(t, ns, "long", &c)
		return c.Status.Phase == wbv1.CommandRunning, fmt.Sprintf("%+v\nagent log:\n%s", c.Status, first.LogTail())
	})
	must(t, first.Crash())
	if got := vmProcessesIn(t, state, string(vm.UID)); strings.Join(got, ",") != strings.Join(procs, ",") {
		t.Fatalf("the VM did not survive the agent: %v, before %v", got, procs)
	}

	second := startAgentProcess(t, bin, kubeconfig, config)
	var c wbv1.TerminalCommand
	eventually(t, 60*time.Second, "the interrupted guest command's truthful outcome", func() (bool, string) {
		get(t, ns, "long", &c)
		return wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions), fmt.Sprintf("%+v\nagent log:\n%s", c.Status, second.LogTail())
	})
	if c.Status.Phase != wbv1.CommandFailed || c.Status.Refusal == nil || c.Status.Refusal.Code != "interrupted" {
		t.Fatalf("status = %+v", c.Status)
	}
	var node wbv1.WorkbenchNode
	eventually(t, 30*time.Second, "the adopted VM among the recovery actions", func() (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: vmNode}, &node); err != nil {
			return false, err.Error()
		}
		for _, r := range node.Status.Recovery {
			if r.Outcome == "recovered" && strings.HasSuffix(r.Resource, "/vms/"+string(vm.UID)) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", node.Status.Recovery)
	})
	// The adopted VM serves a new session: same processes, same generation.
	must(t, env.Client.Create(ctx, session(ns, "s2", "vm")))
	if got := runProfiled(t, ns, "s2", "after", 0, "/bin/uname", "-r"); got.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("command in the adopted VM: %+v", got.Status)
	}
	if vm = readyEnv("vm", second); vm.Status.SourceGeneration != 1 {
		t.Fatalf("the adopted boot's generation changed: %+v", vm.Status)
	}
	if got := vmProcessesIn(t, state, string(vm.UID)); strings.Join(got, ",") != strings.Join(procs, ",") {
		t.Fatalf("the VM was replaced, not adopted: %v, before %v", got, procs)
	}

	// A crash mid-boot: the half-booted VM is quarantined, the next boot advances the
	// generation.
	vm2 := createVM("vm2")
	record := ""
	eventually(t, 60*time.Second, "vm2's QEMU launched (record before the handshake)", func() (bool, string) {
		get(t, ns, "vm2", vm2)
		if vm2.UID == "" {
			return false, "no uid"
		}
		b, err := os.ReadFile(filepath.Join(state, "vms", string(vm2.UID), "record.json"))
		record = string(b)
		return err == nil && strings.Contains(record, `"state": "launching"`) && strings.Contains(record, `"qemu"`), record
	})
	// Freeze the agent first, so the record it left is the one read here: the crash
	// happens while the boot is unfinished, which must be quarantined (never adopted).
	must(t, second.Cmd.Process.Signal(syscall.SIGSTOP))
	b, err := os.ReadFile(filepath.Join(state, "vms", string(vm2.UID), "record.json"))
	must(t, err)
	if !strings.Contains(string(b), `"state": "launching"`) {
		_ = second.Cmd.Process.Signal(syscall.SIGKILL)
		t.Fatalf("vm2's boot finished before the agent was frozen; the mid-boot crash was not exercised: %s", b)
	}
	must(t, second.Crash())
	half := vmProcessesIn(t, state, string(vm2.UID))

	third := startAgentProcess(t, bin, kubeconfig, config)
	defer third.Stop()
	vm2 = readyEnv("vm2", third)
	eventually(t, 30*time.Second, "vm2 quarantined in the recovery actions", func() (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: vmNode}, &node); err != nil {
			return false, err.Error()
		}
		for _, r := range node.Status.Recovery {
			if strings.HasSuffix(r.Resource, "/vms/"+string(vm2.UID)) && r.Outcome == wbv1.RecoveryOutcomeRecovered {
				t.Fatalf("vm2, crashed mid-boot, was adopted: %s", r.Message)
			}
			if strings.HasSuffix(r.Resource, "/vms/"+string(vm2.UID)) && r.Outcome == wbv1.RecoveryOutcomeQuarantined {
				return true, string(r.Outcome) + ": " + r.Message
			}
		}
		return false, fmt.Sprintf("%+v", node.Status.Recovery)
	})
	now := vmProcessesIn(t, state, string(vm2.UID))
	if len(now) != 2 {
		t.Fatalf("vm2 processes after recovery: %v (before the crash %v)", now, half)
	}
	t.Logf("vm2: processes at the crash %v, after recovery %v, generation %d", half, now, vm2.Status.SourceGeneration)
	if strings.Join(now, ",") == strings.Join(half, ",") {
		t.Fatalf("vm2's half-booted processes survived the quarantine: %v", now)
	}
	if vm2.Status.SourceGeneration < 2 {
		t.Fatalf("vm2 was rebooted after quarantine without advancing its generation: %+v", vm2.Status)
	}

	// Teardown through the API leaves nothing behind.
	for _, name := range []string{"vm", "vm2"} {
		must(t, env.Client.Delete(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}))
	}
	eventually(t, 90*time.Second, "both VMs torn down", func() (bool, string) {
		a, b := vmProcessesIn(t, state, string(vm.UID)), vmProcessesIn(t, state, string(vm2.UID))
		ents, _ := os.ReadDir(filepath.Join(state, "vms"))
		return len(a)+len(b) == 0 && len(ents) == 0, fmt.Sprintf("processes %v %v, vms dir %v", a, b, ents)
	})
}

// TestQEMUMicroVMFileOperations: one VM, the file operations of a qemu-microvm.v1
// Environment through the same custom resources and data plane as a host root, all inside
// the guest: structured FilePatches auto-applied (then a guest command reads the new
// content), a dirty patch rejected with patch-dirty and changing nothing, a data-plane read
// and snapshot of a file a guest command created (traversal refused before the guest is
// asked), an export artifact whose digest is that of the stored blob, file.exists probes,
// and a file wait refused with capability-mismatch (the guest protocol has no change
// notifications; waits never poll).
func TestQEMUMicroVMFileOperations(t *testing.T) {
	requireQEMU(t)
	ctx := context.Background()
	ns := namespace(t)
	image := applyImageManifest(t)
	must(t, env.Client.Create(ctx, smallMicroVM(ns, "e", image, func(s *wbv1.EnvironmentSpec) {
		s.PatchApproval = ptr(wbv1.PatchApprovalAutoApply)
		s.PatchPolicy = &wbv1.EnvironmentPatchPolicy{AllowDelete: ptr(true)} // so the delete below reaches the guest path
	})))
	must(t, env.Client.Create(ctx, session(ns, "s", "e")))
	e := waitVMAndSession(t, ns, "e", "s")
	defer func() {
		// One VM per test: tear it down before the next test boots its own.
		must(t, client.IgnoreNotFound(env.Client.Delete(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}})))
		eventually(t, 90*time.Second, "VM torn down", func() (bool, string) {
			procs := vmProcesses(t, string(e.UID))
			return len(procs) == 0, fmt.Sprintf("processes %v", procs)
		})
	}()
	run := func(name, profileName string, argv ...string) string {
		t.Helper()
		c := command(ns, name, argv...)
		c.Spec.ProfileRef = wbv1.ObjectName(profileName)
		must(t, env.Client.Create(ctx, c))
		done := waitFinal(t, ns, name)
		if done.Status.Phase != wbv1.CommandSucceeded {
			t.Fatalf("%s: %+v", name, done.Status)
		}
		return output(t, ns, done)
	}
	must(t, env.Client.Create(ctx, profile(ns, "cat", "/bin/cat", nil, []string{"a.txt", "out/"})))
	must(t, env.Client.Create(ctx, profile(ns, "cp", "/bin/cp", nil, []string{"a.txt", "copied.txt"})))
	must(t, env.Client.Create(ctx, profile(ns, "mkdir", "/bin/mkdir", nil, []string{"out"})))

	// A structured FilePatch, auto-applied inside the guest; the guest's cat sees it.
	must(t, env.Client.Create(ctx, filePatch(t, ns, "create", func(s *wbv1.FilePatchSpec) {
		s.Format, s.Policy.AllowCreate = wbv1.PatchFormatStructured, ptr(true)
		s.Operations = []wbv1.FileOperation{{Op: "create", Path: "a.txt", Content: ptr("from the host\n")}}
	})))
	fp := patchPhase(t, ns, "create", "Applied")
	if want := []wbv1.ChangedFile{{Path: "a.txt", Op: "create", DigestAfter: sha("from the host\n")}}; fmt.Sprint(fp.Status.ChangedFiles) != fmt.Sprint(want) {
		t.Fatalf("create: %+v", fp.Status)
	}
	if out := run("cat1", "cat", "/bin/cat", "a.txt"); out != "from the host\n" {
		t.Fatalf("cat in the guest after the patch: %q", out)
	}
	// A replacement (and a create in a directory a guest command made), digests before/after.
	if out := run("mkdir", "mkdir", "/bin/mkdir", "out"); out != "" {
		t.Fatalf("mkdir: %q", out)
	}
	must(t, env.Client.Create(ctx, filePatch(t, ns, "replace", func(s *wbv1.FilePatchSpec) {
		s.Format, s.Policy.AllowCreate = wbv1.PatchFormatStructured, ptr(true)
		s.Operations = []wbv1.FileOperation{
			{Op: "replace", Path: "a.txt", Content: ptr("second\n")},
			{Op: "create", Path: "out/report.txt", Content: ptr("report\n")},
		}
	})))
	fp = patchPhase(t, ns, "replace", "Applied")
	want := []wbv1.ChangedFile{
		{Path: "a.txt", Op: "replace", DigestBefore: sha("from the host\n"), DigestAfter: sha("second\n")},
		{Path: "out/report.txt", Op: "create", DigestAfter: sha("report\n")},
	}
	if fmt.Sprint(fp.Status.ChangedFiles) != fmt.Sprint(want) || fp.Status.Refusal != nil {
		t.Fatalf("replace: %+v, want %+v", fp.Status, want)
	}
	if out := run("cat2", "cat", "/bin/cat", "a.txt", "out/report.txt"); out != "second\nreport\n" {
		t.Fatalf("cat in the guest after the second patch: %q", out)
	}

	// A dirty diff is rejected with patch-dirty and changes nothing in the guest.
	must(t, env.Client.Create(ctx, filePatch(t, ns, "dirty", func(s *wbv1.FilePatchSpec) {
		s.Format, s.Patch = wbv1.PatchFormatUnified, ptr("--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-expected\n+changed\n")
	})))
	fp = patchPhase(t, ns, "dirty", "Rejected")
	if fp.Status.Refusal == nil || fp.Status.Refusal.Code != "patch-dirty" || len(fp.Status.ChangedFiles) != 0 {
		t.Fatalf("dirty: %+v", fp.Status)
	}
	// Deleting is not something the guest protocol can do: refused, nothing changed.
	must(t, env.Client.Create(ctx, filePatch(t, ns, "delete", func(s *wbv1.FilePatchSpec) {
		s.Format, s.Policy.AllowDelete = wbv1.PatchFormatStructured, ptr(true)
		s.Operations = []wbv1.FileOperation{{Op: "delete", Path: "a.txt"}}
	})))
	if fp = patchPhase(t, ns, "delete", "Rejected"); fp.Status.Refusal == nil || fp.Status.Refusal.Code != "capability-mismatch" {
		t.Fatalf("delete: %+v", fp.Status)
	}
	if out := run("cat3", "cat", "/bin/cat", "a.txt"); out != "second\n" {
		t.Fatalf("a refused patch changed a.txt in the guest: %q", out)
	}

	// The data plane reads a file a guest command created; traversal is refused.
	run("cp", "cp", "/bin/cp", "a.txt", "copied.txt")
	dp := dataPlane(t)
	opToken := tokenFor(t, ns, "op", "workbench-operator")
	code, body, hd := dp.Get(t, dpclient.FilesPath(ns, "e")+"?op=read&root=repo&path=copied.txt", opToken)
	if code != http.StatusOK || string(body) != "second\n" || hd.Get("X-Workbench-Digest") != string(sha("second\n")) || hd.Get("X-Workbench-Truncated") != "false" {
		t.Fatalf("read of the guest's file: %d %s %v", code, body, hd)
	}
	code, body = dp.Call(t, http.MethodGet, dpclient.FilesPath(ns, "e")+"?op=snapshot&root=repo", opToken, nil)
	var snap struct {
		Entries []struct{ Path, Type, Digest string }
	}
	if code != http.StatusOK || json.Unmarshal(body, &snap) != nil {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	listed := map[string]string{}
	for _, en := range snap.Entries {
		listed[en.Path] = en.Type + " " + en.Digest
	}
	if listed["copied.txt"] != "file "+string(sha("second\n")) || listed["out"] != "dir " || listed["out/report.txt"] != "file "+string(sha("report\n")) {
		t.Fatalf("snapshot of the guest root: %s", body)
	}
	for path, wantCode := range map[string]string{"../../etc/passwd": "path-traversal", "/etc/passwd": "path-absolute", "missing.txt": "path-not-found"} {
		code, body := dp.Call(t, http.MethodGet, dpclient.FilesPath(ns, "e")+"?op=read&root=repo&path="+path, opToken, nil)
		if code == http.StatusOK || dpclient.Code(t, body) != wantCode {
			t.Fatalf("read %s: %d %s, want %s", path, code, body, wantCode)
		}
	}

	// An export artifact of a guest directory: the stored blob's digest, the host's format.
	entries := exportedOut(ctx, t, ns, "x")
	for _, en := range entries {
		if h := en.hdr; !h.ModTime.Equal(time.Unix(0, 0)) || h.Uid != 0 || h.Uname != "" {
			t.Fatalf("entry %q is not in the deterministic format: %+v", h.Name, h)
		}
		if en.hdr.Name == "out/report.txt" && string(en.data) != "report\n" {
			t.Fatalf("exported report.txt = %q", en.data)
		}
	}
	if got := entryNames(entries); got != "out/report.txt" {
		t.Fatalf("tar entries = %s", got)
	}

	// file.exists probes evaluated once inside the guest.
	must(t, env.Client.Create(ctx, fileExistsProbe(ns, "present", "copied.txt", 10)))
	must(t, env.Client.Create(ctx, fileExistsProbe(ns, "absent", "absent.txt", 10)))
	for name, want := range map[string]wbv1.ProbeResult{"present": "Pass", "absent": "Fail"} {
		probeResult(t, ns, name, want)
	}
	// A file wait is refused: no change notifications, and waits never poll.
	must(t, env.Client.Create(ctx, wait(ns, "w", fileScope("later.txt"), wbv1.ConditionKindFileExists, 30)))
	w := waitStatus(t, ns, "w", 30*time.Second, "Failed", isStatus(wbv1.WaitFailed))
	if w.Status.Refusal == nil || w.Status.Refusal.Code != "capability-mismatch" || !strings.Contains(w.Status.Refusal.Message, "no change notifications") {
		t.Fatalf("file wait on a VM root: %+v", w.Status)
	}
}

// waitVMAndSession waits (up to 180 s: a TCG boot) until environment ns/envName is Ready
// and session ns/session Running, and returns the environment.
func waitVMAndSession(t *testing.T, ns, envName, session string) wbv1.Environment {
	t.Helper()
	var e wbv1.Environment
	eventually(t, 180*time.Second, "VM environment Ready and session Running", func() (bool, string) {
		return kstate.ReadyAndRunning(t, env.Client, ns, envName, session, &e)
	})
	return e
}

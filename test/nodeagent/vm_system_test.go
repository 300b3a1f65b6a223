package nodeagent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends/qemumicrovm"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/dpclient"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
)

// systemBootWithin bounds the full-system boot in make test: systemd under TCG measured
// 60-70 s to the agent on a busy 2-core host (h5's note); the backend's own bound is
// qemumicrovm.DefaultSystemBootTimeout.
const systemBootWithin = 450 * time.Second

// systemManifest applies the full-system ImageManifest `make guest-image` wrote next to its
// image (bin/guest-system/imagemanifest.yaml) and returns its name.
func systemManifest(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "bin", "guest-system", "imagemanifest.yaml"))
	if err != nil {
		t.Skipf("the full-system image is not built (run `make guest-image`): %v", err)
	}
	var im wbv1.ImageManifest
	must(t, yaml.UnmarshalStrict(raw, &im))
	must(t, nodeagenttest.ApplyBuiltImageManifest(context.Background(), env, &im))
	return im.Name
}

// systemImage applies the full-system ImageManifest (systemManifest) and returns its name
// and the image's kernel release (from digests.txt).
func systemImage(t *testing.T) (name, kernel string) {
	t.Helper()
	name = systemManifest(t)
	dir := filepath.Join(repoRoot(), "bin", "guest-system")
	d, err := os.ReadFile(filepath.Join(dir, "digests.txt"))
	must(t, err)
	for _, l := range strings.Split(string(d), "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "kernel" {
			kernel = f[4]
		}
	}
	if kernel == "" {
		t.Fatalf("no kernel release in %s/digests.txt", dir)
	}
	return name, kernel
}

// startFullSystemNode starts a node-agent process for node with the qemu-microvm.v1
// backend under TCG (storage.maxMiB maxMiB, 64 MiB default disks, then extra config lines)
// over a fresh state directory named statePrefix* (short: VM socket paths are bounded),
// and waits until the node's capability claims full-system-linux and capOK holds of it.
// At the test's end the agent stops (its log shown when the test failed), its loop disks
// are released and the state directory goes.
func startFullSystemNode(t *testing.T, node, statePrefix string, maxMiB int, extra string, capOK func(wbv1.BackendCapabilitySpec) bool) (state string, proc *agentProcess) {
	t.Helper()
	state, err := os.MkdirTemp("", statePrefix)
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	t.Cleanup(func() { must(t, nodeagenttest.Release(agent.Config{NodeName: node, StateDir: state})) })
	q, _ := nodeagenttest.QEMU()
	config := filepath.Join(t.TempDir(), "node-agent.yaml")
	must(t, os.WriteFile(config, []byte(fmt.Sprintf("nodeName: %s\nstateDir: %s\nheartbeatSeconds: 2\ndataPlaneAddress: 127.0.0.1:0\n"+
		"storage:\n  maxMiB: %d\n  defaultDiskMiB: 64\nqemu:\n  enabled: true\n  imageDir: %s\n  accel: tcg\n%s", node, state, maxMiB, q.ImageDir, extra)), 0o600))
	proc = startAgentProcess(t, buildAgent(t), boundNodeKubeconfig(t, node), config)
	t.Cleanup(func() { proc.StopLogging(t) })
	eventually(t, 60*time.Second, "the node's qemu-microvm.v1 capability claims full-system-linux", func() (bool, string) {
		var c wbv1.BackendCapability
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node + ".qemu-microvm.v1"}, &c); err != nil {
			return false, err.Error()
		}
		s := c.Spec
		return s.SystemFidelity == "full-system-linux" && capOK(s), fmt.Sprintf("%+v", s)
	})
	return state, proc
}

// fullSystemEnv is a full-system qemu-microvm.v1 Environment on node (1 vCPU, 512 MiB)
// booting image with roots.
func fullSystemEnv(ns, name, node, image string, roots ...wbv1.EnvironmentRoot) *wbv1.Environment {
	full := wbv1.SystemFidelity("full-system-linux")
	return &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendQEMUMicroVM, Requirements: &wbv1.EnvironmentRequirements{SystemFidelity: &full},
		Roots: roots, ImageRef: ptr(image),
		Resources:    &wbv1.EnvironmentResources{VCPUs: ptr(int32(1)), MemoryMiB: ptr(int32(512))},
		NodeSelector: map[string]string{wbv1.NodeLabel: node},
	}}
}

// stopVMsAtEnd deletes, at the test's end, every Environment in ns and fails unless all
// their VM processes under state are gone within 90 s (the agent tears them down):
// whatever happened, no VM of the test outlives it.
func stopVMsAtEnd(t *testing.T, ns, state string) {
	t.Cleanup(func() {
		ctx := context.Background()
		var es wbv1.EnvironmentList
		_ = env.Client.List(ctx, &es, client.InNamespace(ns))
		for i := range es.Items {
			_ = env.Client.Delete(ctx, &es.Items[i])
		}
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			left := 0
			for i := range es.Items {
				left += len(vmProcessesIn(t, state, string(es.Items[i].UID)))
			}
			if left == 0 {
				return
			}
		}
		t.Errorf("VM processes of %s outlived the test", ns)
	})
}

// TestQEMUFullSystemEnvironment boots the full-system variant through the API server on a
// node whose storage reservation holds one working disk: Environment Ready, commands (its
// kernel is the image's, only lo, no host path, systemctl is-system-running), a file
// read, a patch creating directories, a PTY session whose forks hit the environment's
// pids limit inside the guest, a second environment's clone refused (storage-exhausted),
// and teardown leaving no process, VM directory or disk.
func TestQEMUFullSystemEnvironment(t *testing.T) {
	requireQEMU(t)
	image, kernel := systemImage(t)
	ctx := context.Background()
	const node = "node-system"
	// storage.maxMiB 2560: one 1536 MiB working disk fits, a second does not.
	state, _ := startFullSystemNode(t, node, "wb-sys-", 2560, "", func(s wbv1.BackendCapabilitySpec) bool {
		return strings.Contains(fmt.Sprint(s.DeviceClasses), "virtio-block")
	})
	ns := namespace(t)
	newEnv := func(name string) *wbv1.Environment {
		e := fullSystemEnv(ns, name, node, image, wbv1.EnvironmentRoot{Name: "repo"})
		e.Spec.Resources.PIDs, e.Spec.PatchApproval = ptr(int32(24)), ptr(wbv1.PatchApprovalAutoApply)
		return e
	}
	stopVMsAtEnd(t, ns, state)
	start := time.Now()
	must(t, env.Client.Create(ctx, newEnv("sys")))
	must(t, env.Client.Create(ctx, session(ns, "s", "sys")))
	var e wbv1.Environment
	eventually(t, 60*time.Second, "the environment's working disk cloned", func() (bool, string) {
		get(t, ns, "sys", &e)
		if e.UID == "" {
			return false, "no uid"
		}
		_, err := os.Lstat(filepath.Join(state, qemumicrovm.DisksDir, string(e.UID)+".img"))
		return err == nil, fmt.Sprintf("%v; env %+v", err, e.Status)
	})
	disk := filepath.Join(state, qemumicrovm.DisksDir, string(e.UID)+".img")

	// A second environment's clone does not fit the node's reservation: refused.
	must(t, env.Client.Create(ctx, newEnv("second")))
	eventually(t, 90*time.Second, "the second environment refused with storage-exhausted", func() (bool, string) {
		return kstate.EnvironmentNotReady(t, env.Client, ns, "second", func(m string) bool { return strings.Contains(m, "storage-exhausted") })
	})
	var second wbv1.Environment
	get(t, ns, "second", &second)
	if exists(filepath.Join(state, qemumicrovm.DisksDir, string(second.UID)+".img")) {
		t.Fatal("the refused clone left a disk")
	}
	must(t, env.Client.Delete(ctx, &second))

	eventually(t, systemBootWithin, "full-system VM Ready and session Running", func() (bool, string) {
		return kstate.ReadyAndRunning(t, env.Client, ns, "sys", "s", &e)
	})
	t.Logf("through the API server: full-system Environment create → Ready and session Running %v", time.Since(start).Round(time.Millisecond))

	dp := dataPlaneOf(t, node)
	opToken := tokenFor(t, ns, "op", "workbench-operator")
	run := func(name, exe string, argv ...string) (*wbv1.TerminalCommand, string) {
		t.Helper()
		done := runProfiled(t, ns, "s", name, 60, exe, argv...)
		return done, sessionOutput(t, dp, opToken, ns, "s", done)
	}
	ok := func(name, exe string, argv ...string) string {
		t.Helper()
		c, out := run(name, exe, argv...)
		if c.Status.Phase != wbv1.CommandSucceeded {
			t.Fatalf("%s %v: %+v %q", exe, argv, c.Status, out)
		}
		return out
	}
	// Its kernel is the image's, booted from the working disk.
	if out := ok("uname", "/usr/bin/uname", "-r"); strings.TrimSpace(out) != kernel {
		t.Fatalf("guest kernel %q, the image's is %q", out, kernel)
	}
	if out := ok("cmdline", "/usr/bin/cat", "/proc/cmdline"); !strings.Contains(out, "root=/dev/vda") {
		t.Fatalf("/proc/cmdline %q", out)
	}
	// Only the loopback interface; no host filesystem mounted (no 9p, virtio-fs, host path).
	if out := ok("net", "/usr/bin/ls", "/sys/class/net"); strings.Join(strings.Fields(out), ",") != "lo" {
		t.Fatalf("/sys/class/net: %q", out)
	}
	mounts := ok("mounts", "/usr/bin/cat", "/proc/mounts")
	for _, bad := range []string{"9p", "virtiofs", state, workspace} {
		if strings.Contains(mounts, bad) {
			t.Fatalf("guest mounts name %q:\n%s", bad, mounts)
		}
	}
	if c, _ := run("hostpath", "/usr/bin/ls", workspace); c.Status.Phase == wbv1.CommandSucceeded {
		t.Fatalf("the host's %s is visible in the guest", workspace)
	}
	// systemd is PID 1 and the system came up.
	if out := ok("comm", "/usr/bin/cat", "/proc/1/comm"); strings.TrimSpace(out) != "systemd" {
		t.Fatalf("PID 1 is %q", out)
	}
	// The agent starts before multi-user.target: wait for the boot to finish.
	c, out := run("running", "/usr/bin/systemctl", "is-system-running", "--wait")
	t.Logf("systemctl is-system-running: %q (%s)", strings.TrimSpace(out), c.Status.Phase)
	if st := strings.TrimSpace(out); st != "running" {
		_, failed := run("failed", "/usr/bin/systemctl", "--failed", "--no-legend", "--plain")
		t.Fatalf("systemctl is-system-running: %q; failed units: %q", st, failed)
	}

	// A patch creating a file in directories that do not exist yet, then a read of it.
	must(t, env.Client.Create(ctx, filePatch(t, ns, "newdir", func(s *wbv1.FilePatchSpec) {
		s.EnvironmentRef, s.Format, s.Policy.AllowCreate = "sys", wbv1.PatchFormatStructured, ptr(true)
		s.Operations = []wbv1.FileOperation{{Op: "create", Path: "made/by/patch.txt", Content: ptr("on the disk\n")}}
	})))
	if fp := patchPhase(t, ns, "newdir", "Applied"); len(fp.Status.ChangedFiles) != 1 {
		t.Fatalf("newdir: %+v", fp.Status)
	}
	code, body, _ := dp.Get(t, dpclient.FilesPath(ns, "sys")+"?op=read&root=repo&path=made/by/patch.txt", opToken)
	if code != http.StatusOK || string(body) != "on the disk\n" {
		t.Fatalf("read of the patched file: %d %s", code, body)
	}

	// A command forking past resources.pids (24) fails inside the guest: its own cgroup.
	must(t, env.Client.Create(ctx, filePatch(t, ns, "forkpl", func(s *wbv1.FilePatchSpec) {
		s.EnvironmentRef, s.Format, s.Policy.AllowCreate = "sys", wbv1.PatchFormatStructured, ptr(true)
		s.Operations = []wbv1.FileOperation{{Op: "create", Path: "fork.pl", Content: ptr(
			"my ($ok, $fail) = (0, 0);\nfor (1..40) { my $p = fork(); if (!defined $p) { $fail++ } elsif ($p == 0) { sleep 20; exit 0 } else { $ok++ } }\nprint \"forked $ok failed $fail\\n\";\n")}}
	})))
	patchPhase(t, ns, "forkpl", "Applied")
	forks := ok("fork", "/usr/bin/perl", "fork.pl")
	var forked, failed int
	if _, err := fmt.Sscanf(forks, "forked %d failed %d", &forked, &failed); err != nil || forked >= 24 || failed == 0 {
		t.Fatalf("40 forks under pids=24: %q (%v)", forks, err)
	}
	t.Logf("in the guest under resources.pids=24: %s", strings.TrimSpace(forks))

	// A PTY session in the guest: operator input reaches its program, the echo comes back.
	catPTYSession(t, ns, "sys", "/usr/bin/cat", 60*time.Second)
	dp.Echo(t, opToken, opToken, ns, "pty", "hello full system", 2, 60*time.Second)
	askSessionClosed(t, ns, "pty")
	waitSessionClosedClean(t, ns, "pty", "the guest PTY session closed with cleanup complete")

	// Teardown (spec.teardown unset: Delete) leaves no process, VM directory or disk.
	must(t, env.Client.Delete(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns}}))
	must(t, env.Client.Delete(ctx, &e))
	dir := filepath.Join(state, "vms", string(e.UID))
	eventually(t, 90*time.Second, "full-system VM torn down with its disk", func() (bool, string) {
		procs := vmProcessesIn(t, state, string(e.UID))
		return len(procs) == 0 && !exists(dir) && !exists(disk), fmt.Sprintf("processes %v, dir %v, disk %v", procs, exists(dir), exists(disk))
	})
}

// nodeDataPlane is the data plane of another node of the suite.
func dataPlaneOf(t *testing.T, node string) dpclient.Client {
	t.Helper()
	ep, hc, err := nodeagenttest.DataPlane(context.Background(), env, node)
	must(t, err)
	return dpclient.Client{Endpoint: ep, HTTP: hc}
}

// TestFullSystemManifestNeedsEquivalence: an ImageManifest with a full-system variant (a
// disk) lacking any of the seed's equivalence fields is refused at admission (image-invalid,
// naming what is missing); with all of them it is admitted.
func TestFullSystemManifestNeedsEquivalence(t *testing.T) {
	ctx := context.Background()
	d := func(c string) wbv1.Digest { return wbv1.Digest("sha256:" + strings.Repeat(c, 64)) }
	file := func(c, p string) *wbv1.ImageFile { return &wbv1.ImageFile{Digest: d(c), Path: wbv1.RelativePath(p)} }
	mk := func(name string, digests wbv1.ImageDigests) *wbv1.ImageManifest {
		return &wbv1.ImageManifest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: wbv1.ImageManifestSpec{Digests: digests,
			Variants: []wbv1.ImageVariant{{Name: "full-system", BackendID: wbv1.BackendQEMUMicroVM, Architecture: wbv1.ArchitectureX8664,
				BootMode: wbv1.BootModeDirectKernel, Kernel: file("1", "guest-system/vmlinux"), Initrd: file("2", "guest-system/initrd.img"),
				Disk: file("3", "guest-system/rootfs.raw")}}}}
	}
	all := wbv1.ImageDigests{Userspace: d("3"), SBOM: d("4"), Provenance: d("5"), ProvenanceRef: "build@abc", Agent: d("6"), Protocol: d("7")}
	for field, drop := range map[string]func(*wbv1.ImageDigests){
		"spec.digests.sbom":          func(x *wbv1.ImageDigests) { x.SBOM = "" },
		"spec.digests.provenance":    func(x *wbv1.ImageDigests) { x.Provenance = "" },
		"spec.digests.provenanceRef": func(x *wbv1.ImageDigests) { x.ProvenanceRef = "" },
	} {
		ds := all
		drop(&ds)
		err := env.Client.Create(ctx, mk("eq-missing", ds))
		if err == nil || !strings.Contains(err.Error(), "image-invalid") || !strings.Contains(err.Error(), field) {
			t.Fatalf("a full-system manifest without %s: %v", field, err)
		}
	}
	m := mk("eq-complete", all)
	must(t, env.Client.Create(ctx, m))
	must(t, env.Client.Delete(ctx, m))
}

// sessionOutput is a command's output read through its node's data plane (the events of
// session in [SeqFrom, SeqTo]).
func sessionOutput(t *testing.T, dp dpclient.Client, token, ns, session string, c *wbv1.TerminalCommand) string {
	t.Helper()
	var out strings.Builder
	if c.Status.SeqFrom == 0 {
		return ""
	}
	for cursor := uint64(c.Status.SeqFrom) - 1; cursor < uint64(c.Status.SeqTo); { // events after the cursor
		evs := dp.Events(t, token, ns, session, cursor)
		for _, e := range evs {
			if e.Seq >= uint64(c.Status.SeqFrom) && e.Seq <= uint64(c.Status.SeqTo) && e.Type == "output" {
				out.WriteString(e.Text)
				out.Write(e.DataBase64)
			}
		}
		if len(evs) == 0 || evs[len(evs)-1].Seq <= cursor {
			break
		}
		cursor = evs[len(evs)-1].Seq
	}
	return out.String()
}

package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends/qemumicrovm"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/platform/loopdisk"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// TestQEMUFullSystemGitSource (issue 28 item 1): a git source on a full-system
// qemu-microvm.v1 Environment is materialized by the node into the VM's working disk
// before its first boot. Through the API server and a node-agent process: the guest sees
// the commit's tree (content, symlink, .git at the commit) under its root and can write
// there; status.roots reports the resolved commit, entries and bytes; nothing stays
// mounted on the host. A wrong commit on a second VM is refused with
// source-commit-not-found and leaves no working disk.
func TestQEMUFullSystemGitSource(t *testing.T) {
	requireQEMU(t)
	if err := loopdisk.Check(); err != nil {
		t.Skipf("no loop devices here: %v", err)
	}
	image := systemManifest(t)
	ctx := context.Background()
	const node = "node-vmsrc"
	state, err := os.MkdirTemp("", "wb-vsrc-") // short: VM socket paths are bounded
	must(t, err)
	defer func() { _ = os.RemoveAll(state) }()
	defer func() { must(t, nodeagenttest.Release(agent.Config{NodeName: node, StateDir: state})) }()
	repos := t.TempDir()
	repo, ids := sourcetest.Repo(t, repos, "repo", map[string]string{"README.md": "hello\n", "src/main.go": "package main\n", "src/link": "->main.go"})
	q, _ := nodeagenttest.QEMU()
	config := filepath.Join(t.TempDir(), "node-agent.yaml")
	must(t, os.WriteFile(config, []byte(fmt.Sprintf("nodeName: %s\nstateDir: %s\nheartbeatSeconds: 2\ndataPlaneAddress: 127.0.0.1:0\n"+
		"storage:\n  maxMiB: 3400\n  defaultDiskMiB: 64\nqemu:\n  enabled: true\n  imageDir: %s\n  accel: tcg\nsources:\n  allowedFileDirs: [%q]\n",
		node, state, q.ImageDir, repos)), 0o600))
	proc := startAgentProcess(t, buildAgent(t), boundNodeKubeconfig(t, node), config)
	defer proc.stopLogging(t)
	eventually(t, 60*time.Second, "the node's qemu-microvm.v1 capability claims full-system-linux", func() (bool, string) {
		var c wbv1.BackendCapability
		if err := env.Client.Get(ctx, client.ObjectKey{Name: node + ".qemu-microvm.v1"}, &c); err != nil {
			return false, err.Error()
		}
		return c.Spec.SystemFidelity == "full-system-linux", fmt.Sprintf("%+v", c.Spec)
	})
	ns := namespace(t)
	full := wbv1.SystemFidelity("full-system-linux")
	newEnv := func(name, commit string) *wbv1.Environment {
		return &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendQEMUMicroVM, Requirements: &wbv1.EnvironmentRequirements{SystemFidelity: &full},
			Roots:        []wbv1.EnvironmentRoot{{Name: "repo", Git: &wbv1.GitRootSource{URL: "file://" + repo, Commit: ptr(commit)}}},
			ImageRef:     ptr(image),
			Resources:    &wbv1.EnvironmentResources{VCPUs: ptr(int32(1)), MemoryMiB: ptr(int32(512))},
			NodeSelector: map[string]string{wbv1.NodeLabel: node},
		}}
	}
	defer func() {
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
	}()

	// A commit the repository does not have: refused with its code, no disk kept.
	wrong := strings.Repeat("0", 39) + "1"
	must(t, env.Client.Create(ctx, newEnv("wrong", wrong)))
	var bad wbv1.Environment
	eventually(t, 120*time.Second, "the wrong commit refused with source-commit-not-found", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wrong"}, &bad))
		c := readyOf(&bad)
		return c.Status == metav1.ConditionFalse && strings.HasPrefix(c.Message, "source-commit-not-found"), fmt.Sprintf("%+v\nagent log:\n%s", bad.Status, tail(proc.log.String()))
	})
	if len(bad.Status.Roots) != 1 || bad.Status.Roots[0].Reason != "source-commit-not-found" {
		t.Fatalf("status.roots of the refused VM: %+v", bad.Status.Roots)
	}
	if exists(filepath.Join(state, qemumicrovm.DisksDir, string(bad.UID)+".img")) {
		t.Fatal("the refused source left its working disk")
	}
	if procs := vmProcessesIn(t, state, string(bad.UID)); len(procs) != 0 {
		t.Fatalf("a VM was booted for the refused source: %v", procs)
	}
	must(t, env.Client.Delete(ctx, &bad))

	start := time.Now()
	must(t, env.Client.Create(ctx, newEnv("sys", ids[0])))
	must(t, env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "sys"}}))
	var e wbv1.Environment
	eventually(t, systemBootWithin, "sourced full-system VM Ready and session Running", func() (bool, string) {
		var s wbv1.TerminalSession
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sys"}, &e))
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, &s))
		return e.Status.Phase == wbv1.EnvironmentReady && s.Status.Phase == wbv1.SessionRunning, fmt.Sprintf("env=%+v session=%+v", e.Status, s.Status)
	})
	t.Logf("sourced full-system Environment create → Ready %v; status.roots %+v", time.Since(start).Round(time.Millisecond), e.Status.Roots)
	if len(e.Status.Roots) != 1 {
		t.Fatalf("status.roots: %+v", e.Status.Roots)
	}
	if r := e.Status.Roots[0]; r.Kind != "git" || r.Resolved != ids[0] || r.Reason != "" || r.Entries == 0 || r.Bytes == 0 {
		t.Fatalf("status.roots[0]: %+v", r)
	}
	if m, err := loopdisk.MountsUnder(state); err != nil || len(m) != 0 {
		t.Fatalf("mounts left under the state directory after the fill: %+v %v", m, err)
	}
	if exists(filepath.Join(state, "vm-fill", string(e.UID))) {
		t.Fatal("the fill's mount point is left")
	}

	// In the guest: the commit's tree beneath the root (cwd = the root).
	phase := func(name, exe string, argv ...string) wbv1.CommandPhase {
		t.Helper()
		must(t, env.Client.Create(ctx, profile(ns, name, exe, nil, argv)))
		c := command(ns, name, append([]string{exe}, argv...)...)
		c.Spec.ProfileRef, c.Spec.TimeoutSeconds = wbv1.ObjectName(name), 60
		must(t, env.Client.Create(ctx, c))
		return waitFinal(t, ns, name).Status.Phase
	}
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"readme", []string{"/usr/bin/grep", "-qx", "hello", "README.md"}},
		{"main", []string{"/usr/bin/grep", "-qx", "package main", "src/main.go"}},
		{"link", []string{"/usr/bin/test", "-L", "src/link"}},
		{"head", []string{"/usr/bin/grep", "-q", ids[0], ".git/HEAD"}},
		{"hooks", []string{"/usr/bin/test", "-d", ".git/hooks"}},
		{"write", []string{"/usr/bin/cp", "README.md", "copy.txt"}},
		{"written", []string{"/usr/bin/grep", "-qx", "hello", "copy.txt"}},
	} {
		if p := phase(c.name, c.argv[0], c.argv[1:]...); p != wbv1.CommandSucceeded {
			t.Fatalf("in the guest %v: %s", c.argv, p)
		}
	}
	// The check itself can fail: a file the commit does not hold is not there.
	if p := phase("absent", "/usr/bin/test", "-e", "not-in-the-commit"); p == wbv1.CommandSucceeded {
		t.Fatal("test -e of a file the commit lacks succeeded: the checks above prove nothing")
	}
}

func readyOf(e *wbv1.Environment) metav1.Condition {
	for _, c := range e.Status.Conditions {
		if c.Type == wbv1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}

// systemManifest applies the full-system ImageManifest `make guest-image` wrote next to its
// image and returns its name (systemImage without the kernel release, which this test
// does not need).
func systemManifest(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "bin", "guest-system", "imagemanifest.yaml"))
	if err != nil {
		t.Skipf("the full-system image is not built (run `make guest-image`): %v", err)
	}
	var im wbv1.ImageManifest
	must(t, yaml.UnmarshalStrict(raw, &im))
	if err := env.Client.Create(context.Background(), &im); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("ImageManifest %s: %v", im.Name, err)
	}
	return im.Name
}

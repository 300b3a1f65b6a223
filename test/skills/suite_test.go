// Package skills runs seed 004's loop end to end — record, crystallize, replay, prove,
// export and import — through a real API server (CRDs, webhooks, the manager's controllers)
// and a real node agent running real commands on real directories, and on a real VM guest
// where the guest image exists. The canonical fixtures live in test/fixtures/skills.
package skills

import (
	"bytes"
	"context"
	"fmt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sigs.k8s.io/yaml"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/controllers"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/webhooks"
)

const nodeName = "node-skills"

var (
	env       *envtest.Env
	workspace string // admitted root "work"
	stateDir  string // the agent's state directory
	qemuSkip  string
)

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper() // the agent re-executes this binary as its sandbox helper
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "SKIP skills suite: needs root for the node agent's sandboxes")
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	env, err = envtest.Start(envtest.Options{Setup: func(mgr ctrl.Manager) error {
		if err := controllers.SetupWithManager(mgr, controllers.Config{}); err != nil {
			return err
		}
		return webhooks.SetupWithManager(mgr)
	}})
	if err == envtest.ErrNoAssets {
		fmt.Fprintln(os.Stderr, "SKIP skills suite:", err)
		return 0, nil
	}
	if err != nil {
		return 1, err
	}
	defer env.Stop()
	tmp, err := os.MkdirTemp("", "wb-skills-")
	if err != nil {
		return 1, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	workspace = filepath.Join(tmp, "work")
	if err := os.MkdirAll(workspace, 0o755); err != nil {
		return 1, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stateDir = filepath.Join(tmp, "state")
	if _, err := nodeagenttest.Start(ctx, env, agent.Config{NodeName: nodeName, StateDir: stateDir,
		AdmittedRoots: map[string]string{"work": workspace}, HeartbeatSeconds: 5, DataPlaneAddress: "127.0.0.1:0",
		Caps: agent.Caps{Sessions: 64, SessionsPerEnvironment: 8}, QEMU: qemuConfig()}, agent.Options{}); err != nil {
		return 1, err
	}
	code := m.Run()
	cancel()
	if err := nodeagenttest.Release(agent.Config{NodeName: nodeName, StateDir: stateDir}); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return code, nil
}

func repoRoot() string { return envtest.RepoRoot() }

// qemuConfig enables the qemu-microvm.v1 backend where the guest image exists (bin/guest,
// built by `make guest-image`), as the node-agent VM suite does.
func qemuConfig() *agent.QEMUConfig {
	bin, _ := filepath.Abs(filepath.Join(repoRoot(), "bin"))
	switch {
	case os.Getenv("WORKBENCH_SKIP_VM") == "1":
		qemuSkip = "WORKBENCH_SKIP_VM=1"
	case runtime.GOARCH != "amd64":
		qemuSkip = "the guest image is x86_64; this is " + runtime.GOARCH
	default:
		for _, f := range []string{"vmlinux", "initramfs.cpio", "vhost-device-vsock"} {
			if _, err := os.Stat(filepath.Join(bin, "guest", f)); err != nil && qemuSkip == "" {
				qemuSkip = fmt.Sprintf("bin/guest/%s missing: run `make guest-image` first (%v)", f, err)
			}
		}
		if _, err := exec.LookPath("qemu-system-x86_64"); err != nil && qemuSkip == "" {
			qemuSkip = fmt.Sprintf("qemu-system-x86_64 not found (installed by `make guest-image`): %v", err)
		}
	}
	if qemuSkip != "" {
		return nil
	}
	return &agent.QEMUConfig{Enabled: true, ImageDir: bin, Accel: "tcg"}
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sk-"}}
	must(t, env.Client.Create(context.Background(), ns))
	return ns.Name
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last saw: %s", timeout, what, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func get(t *testing.T, ns, name string, obj client.Object) {
	t.Helper()
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj))
}

var _ = wbv1.GroupVersion

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func applyImageManifest(t *testing.T) string {
	t.Helper()
	p := filepath.Join(repoRoot(), "bin", "guest", "imagemanifest.yaml")
	if _, err := os.Stat(p); err != nil {
		p = filepath.Join(repoRoot(), "config", "samples", "07_imagemanifest.yaml")
	}
	raw, err := os.ReadFile(p)
	must(t, err)
	var im wbv1.ImageManifest
	must(t, yaml.UnmarshalStrict(raw, &im))
	if err := env.Client.Create(context.Background(), &im); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return im.Name
}

package nodeagent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/qemumicrovm"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/samples"
)

// qemuSkip says why the VM benchmark skips ("" when the bench agent runs qemu-microvm.v1).
var qemuSkip = "the bench agent was not started"

// vmProcs counts the QEMU and vsock device processes whose command line names uid.
func vmProcs(uid string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		exe, _ := os.Readlink("/proc/" + e.Name() + "/exe")
		if b := filepath.Base(exe); b != "qemu-system-x86_64" && b != "vhost-device-vsock" {
			continue
		}
		if cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); bytes.Contains(cmd, []byte("/vms/"+uid+"/")) {
			n++
		}
	}
	return n
}

// vmImage skips unless the bench agent runs qemu-microvm.v1, applies the guest image's
// ImageManifest and waits (60 s at most) until the node has published its qemu-microvm.v1
// capability.
func vmImage(b *testing.B) *wbv1.ImageManifest {
	if qemuSkip != "" {
		b.Skip(qemuSkip)
	}
	ctx := context.Background()
	im, err := nodeagenttest.ImageManifest()
	must(b, err)
	if err := env.Client.Create(ctx, im.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var c wbv1.BackendCapability
		if env.Client.Get(ctx, client.ObjectKey{Name: node + ".qemu-microvm.v1"}, &c) == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no qemu-microvm.v1 capability published")
		}
	}
	return im
}

// bareLaunch is the floor: qemumicrovm's FloorBoot, i.e. the vsock device and QEMU
// started directly with the product's own QEMU command line (the same builder the node
// agent uses: kernel, initrd, accelerator, devices, memory, vCPUs, seccomp sandbox, rng,
// serial), timed from the first process start to the guest agent's handshake answer.
func bareLaunch(b *testing.B, im *wbv1.ImageManifest) time.Duration {
	var v *wbv1.ImageVariant
	for i := range im.Spec.Variants {
		if im.Spec.Variants[i].BackendID == wbv1.BackendQEMUMicroVM {
			v = &im.Spec.Variants[i]
		}
	}
	if v == nil {
		b.Fatal("no qemu-microvm.v1 variant")
	}
	bin := filepath.Join(envtest.RepoRoot(), "bin")
	dir, err := os.MkdirTemp("", "wb-floor-")
	must(b, err)
	defer func() { _ = os.RemoveAll(dir) }()
	bk, err := qemumicrovm.New(qemumicrovm.Config{StateDir: filepath.Join(dir, "state"), ImageDir: bin,
		VhostDeviceVsock: filepath.Join(bin, "guest", "vhost-device-vsock"), Accel: qemumicrovm.AccelTCG})
	must(b, err)
	img := &backends.BootImage{Variant: v.Name, KernelPath: string(v.Kernel.Path), KernelDigest: string(v.Kernel.Digest),
		InitrdPath: string(v.Initrd.Path), InitrdDigest: string(v.Initrd.Digest), CommandLine: v.KernelCommandLine}
	took, err := bk.FloorBoot(context.Background(), img, filepath.Join(dir, "floor"))
	must(b, err)
	return took
}

// BenchmarkVMEnvironmentReady: qemu-microvm.v1 Environment create (through the API server,
// the manager's placement and the node agent) → Ready (the guest agent answered the
// handshake and the roots exist), p50 over 10 boots, against the floor of a bare QEMU
// launch to the agent's first reply with the same kernel, image and accelerator (TCG),
// interleaved in the same run. Each environment is deleted and its VM gone before the
// next boot.
func BenchmarkVMEnvironmentReady(b *testing.B) {
	im := vmImage(b)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-vm-"}}
	must(b, env.Client.Create(ctx, ns))
	boots := 10
	if n, err := strconv.Atoi(os.Getenv("WORKBENCH_BENCH_BOOTS")); err == nil && n > 0 {
		boots = n
	}
	var full, floor samples.Durations
	for i := 0; i < b.N; i++ {
		for j := 0; j < boots; j++ {
			floor = append(floor, bareLaunch(b, im))
			name := fmt.Sprintf("vm-%d-%d", i, j)
			w, err := wc.Watch(ctx, &wbv1.EnvironmentList{}, client.InNamespace(ns.Name))
			must(b, err)
			t0 := time.Now()
			e := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name}, Spec: wbv1.EnvironmentSpec{
				Backend: wbv1.BackendQEMUMicroVM, Roots: []wbv1.EnvironmentRoot{{Name: "repo"}}, ImageRef: &im.Name,
				NodeSelector: map[string]string{wbv1.NodeLabel: node}}}
			must(b, env.Client.Create(ctx, e))
			timeout := time.After(120 * time.Second)
		wait:
			for {
				select {
				case ev := <-w.ResultChan():
					if x, ok := ev.Object.(*wbv1.Environment); ok && ev.Type != watch.Deleted && x.Name == name {
						if x.Status.Phase == wbv1.EnvironmentReady {
							break wait
						}
						if x.Status.Phase == wbv1.EnvironmentFailed {
							b.Fatalf("environment failed: %+v", x.Status)
						}
					}
				case <-timeout:
					b.Fatal("environment not Ready within 120s")
				}
			}
			full = append(full, time.Since(t0))
			w.Stop()
			must(b, env.Client.Delete(ctx, e))
			for deadline := time.Now().Add(60 * time.Second); vmProcs(string(e.UID)) > 0; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatalf("VM of %s still running 60s after delete", name)
				}
			}
		}
	}
	full.Report(b, "ready")
	floor.Report(b, "floor")
	samples.Ratio(b, "ready-to-floor", full, floor)
	b.ReportMetric(float64(len(full)), "boots")
	b.Logf("accel=tcg: Environment create → Ready p50 %v (min %v, max %v); bare launch of the product's QEMU command line → agent reply p50 %v (min %v, max %v)",
		full.Quantile(0.5).Round(time.Millisecond), slices.Min(full).Round(time.Millisecond), slices.Max(full).Round(time.Millisecond),
		floor.Quantile(0.5).Round(time.Millisecond), slices.Min(floor).Round(time.Millisecond), slices.Max(floor).Round(time.Millisecond))
}

package nodeagent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/nodeagent/agent"
)

// qemuSkip says why the VM benchmark skips ("" when the bench agent runs qemu-microvm.v1).
var qemuSkip = "the bench agent was not started"

func repoBin() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "bin")
}

// qemuConfig enables qemu-microvm.v1 (TCG) in the bench agent when the guest image, QEMU
// and the vsock device are present.
func qemuConfig() *agent.QEMUConfig {
	qemuSkip = ""
	bin, _ := filepath.Abs(repoBin())
	for _, f := range []string{"vmlinux", "initramfs.cpio", "vhost-device-vsock"} {
		if _, err := os.Stat(filepath.Join(bin, "guest", f)); err != nil && qemuSkip == "" {
			qemuSkip = fmt.Sprintf("bin/guest/%s missing: run `make guest-image` first (%v)", f, err)
		}
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil && qemuSkip == "" {
		qemuSkip = fmt.Sprintf("qemu-system-x86_64 not found (installed by `make guest-image`): %v", err)
	}
	if runtime.GOARCH != "amd64" {
		qemuSkip = "the guest image is x86_64"
	}
	if qemuSkip != "" {
		return nil
	}
	return &agent.QEMUConfig{Enabled: true, ImageDir: bin, Accel: "tcg"}
}

func imageManifest(b *testing.B) *wbv1.ImageManifest {
	p := filepath.Join(repoBin(), "guest", "imagemanifest.yaml")
	if _, err := os.Stat(p); err != nil {
		p = filepath.Join(repoBin(), "..", "config", "samples", "07_imagemanifest.yaml")
	}
	raw, err := os.ReadFile(p)
	must(b, err)
	var im wbv1.ImageManifest
	must(b, yaml.UnmarshalStrict(raw, &im))
	return &im
}

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

func hostTSCkHz() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	if !bytes.Contains(b, []byte(" constant_tsc")) {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return " tsc_early_khz=" + strconv.FormatInt(int64(mhz*1000), 10)
			}
		}
	}
	return ""
}

// bareLaunch is the floor: vhost-device-vsock and QEMU started directly with the command
// line FACTS.md measured (microvm, TCG, 512 MiB memfd, the same kernel, initrd and kernel
// command line), timed from the first process start to the guest agent's first reply.
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
	dir, err := os.MkdirTemp("", "wb-floor-")
	must(b, err)
	defer os.RemoveAll(dir)
	var nonce [32]byte
	_, _ = rand.Read(nonce[:])
	bind := protocol.Binding{EnvironmentRef: "bench/floor", SourceGeneration: 1, PlanDigest: protocol.DigestOf([]byte("p")),
		ImageDigest: protocol.DigestOf([]byte("i")), GuestCID: 3, BootNonce: hex.EncodeToString(nonce[:])}
	bj, _ := json.Marshal(bind)
	must(b, os.WriteFile(filepath.Join(dir, "binding.json"), bj, 0o400))
	vs, gs := filepath.Join(dir, "v.sock"), filepath.Join(dir, "g.sock")
	start := time.Now()
	dev := exec.Command(filepath.Join(repoBin(), "guest", "vhost-device-vsock"), "--guest-cid=3", "--socket="+vs, "--uds-path="+gs)
	must(b, dev.Start())
	defer func() { dev.Process.Kill(); dev.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // benchmark-only polling
		if _, err := os.Stat(vs); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("vhost-device-vsock made no socket")
		}
	}
	ready, err := guestclient.ListenReady(gs, 0)
	must(b, err)
	defer ready.Close()
	q := exec.Command("qemu-system-x86_64", "-machine", "microvm,accel=tcg,memory-backend=mem", "-cpu", "max", "-smp", "1", "-m", "512M",
		"-object", "memory-backend-memfd,id=mem,size=512M,share=on",
		"-kernel", filepath.Join(repoBin(), string(v.Kernel.Path)), "-initrd", filepath.Join(repoBin(), string(v.Initrd.Path)),
		"-append", v.KernelCommandLine+hostTSCkHz(), "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-chardev", "socket,id=char0,path="+vs, "-device", "vhost-user-vsock-device,chardev=char0",
		"-fw_cfg", "name=opt/workbench/binding,file="+filepath.Join(dir, "binding.json"), "-serial", "file:"+filepath.Join(dir, "serial.log"))
	must(b, q.Start())
	defer func() { q.Process.Kill(); q.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	must(b, ready.Wait(ctx))
	c, _, err := guestclient.WaitReady(ctx, guestclient.Endpoint{Path: gs, Hybrid: true}, bind, 20*time.Millisecond)
	must(b, err)
	took := time.Since(start)
	c.Close()
	return took
}

// BenchmarkVMEnvironmentReady: qemu-microvm.v1 Environment create (through the API server,
// the manager's placement and the node agent) → Ready (the guest agent answered the
// handshake and the roots exist), p50 over 10 boots, against the floor of a bare QEMU
// launch to the agent's first reply with the same kernel, image and accelerator (TCG),
// interleaved in the same run. Each environment is deleted and its VM gone before the
// next boot.
func BenchmarkVMEnvironmentReady(b *testing.B) {
	if qemuSkip != "" {
		b.Skip(qemuSkip)
	}
	ctx := context.Background()
	im := imageManifest(b)
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
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-vm-"}}
	must(b, env.Client.Create(ctx, ns))
	boots := 10
	if n, err := strconv.Atoi(os.Getenv("WORKBENCH_BENCH_BOOTS")); err == nil && n > 0 {
		boots = n
	}
	var full, floor []time.Duration
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
	p50 := func(ds []time.Duration) time.Duration { s := slices.Clone(ds); slices.Sort(s); return s[len(s)/2] }
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(p50(full)), "p50-ready-ms")
	b.ReportMetric(ms(p50(floor)), "p50-floor-ms")
	b.ReportMetric(float64(p50(full))/float64(p50(floor)), "ratio-to-floor")
	b.ReportMetric(float64(len(full)), "boots")
	b.Logf("accel=tcg: Environment create → Ready p50 %v (min %v, max %v); bare QEMU launch → agent reply p50 %v (min %v, max %v)",
		p50(full).Round(time.Millisecond), slices.Min(full).Round(time.Millisecond), slices.Max(full).Round(time.Millisecond),
		p50(floor).Round(time.Millisecond), slices.Min(floor).Round(time.Millisecond), slices.Max(floor).Round(time.Millisecond))
}

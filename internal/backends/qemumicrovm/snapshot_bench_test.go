package qemumicrovm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
)

// The snapshot experiment (docs/vm-pause-snapshot.md): what a QEMU can and cannot do to
// start a guest from a memory+device snapshot, measured against a cold boot under the same
// accelerator (TCG) and the same QEMU. It drives QEMU and vhost-device-vsock directly (not
// the broker's confined launch), because the product has no snapshot path: the product's
// microvm puts the vsock device on virtio-mmio, which QEMU (7.2 and 10.0 alike) will not
// migrate and cannot hot-unplug. The machine here is the workaround: microvm with PCIe
// (pcie=on), a PCIe root port, the vsock device hot-pluggable on it, and the guest kernel
// told to drive PCIe hotplug natively (pcie_ports=native: microvm's ACPI grants no _OSC
// control).
//
// Knobs (environment):
//   - WORKBENCH_BENCH_QEMU: the QEMU binary for every launch of the run, the product's
//     floor boot included (default qemu-system-x86_64 from PATH; hack/fetch-qemu10.sh
//     unpacks QEMU 10 and prints the path of a wrapper to set here).
//   - WORKBENCH_BENCH_SNAPSHOT_RAM: how the guest's RAM travels.
//     "stream" (default): in the migration stream (exec: on QEMU < 8.2, file: above).
//     "mapped-ram" (QEMU ≥ 9.0): the file: stream with RAM pages at fixed offsets.
//     "ignore-shared" (x-ignore-shared): the RAM is a file-backed share=on backend under
//     /dev/shm; the stream carries device state only, and each restore starts from a
//     sparse copy of the template's RAM file (the copy is inside the measured restore).
//   - WORKBENCH_BENCH_VSOCK_PCI_PROPS: extra k=v,… properties of vhost-user-vsock-pci
//     (e.g. vectors=0: INTx instead of MSI-X), on every launch and hot-plug.
//   - WORKBENCH_BENCH_SNAPSHOTS: rounds (default 5).

// roundTimeout bounds one measured boot or restore; a round past it counts as failed.
const roundTimeout = 45 * time.Second

// snapOpts is one run's QEMU and RAM mode.
type snapOpts struct {
	qemu         string // binary
	major, minor int    // its version
	ram          string // stream | mapped-ram | ignore-shared
	ramDir       string // /dev/shm scratch for ignore-shared
	pciProps     string // extra vhost-user-vsock-pci properties, k=v,…
}

// vsockDevice is the -device argument of the PCIe vsock device.
func (o snapOpts) vsockDevice(chardev, id string) string {
	d := "vhost-user-vsock-pci,chardev=" + chardev + ",id=" + id + ",bus=rp0"
	if o.pciProps != "" {
		d += "," + o.pciProps
	}
	return d
}

// vsockDeviceAdd is the device_add arguments of the PCIe vsock device.
func (o snapOpts) vsockDeviceAdd(chardev, id string) map[string]any {
	a := map[string]any{"driver": "vhost-user-vsock-pci", "chardev": chardev, "id": id, "bus": "rp0"}
	for _, kv := range strings.Split(o.pciProps, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				a[k] = n // QMP's device_add wants JSON integers for integer properties
			} else {
				a[k] = v
			}
		}
	}
	return a
}

// ramPath is a RAM file under ramDir for ignore-shared, else "" (memfd).
func (o snapOpts) ramPath(name string) string {
	if o.ramDir == "" {
		return ""
	}
	return filepath.Join(o.ramDir, name)
}

// removeRAM deletes a RAM file ramPath gave.
func removeRAM(path string) {
	if path != "" {
		_ = os.Remove(path)
	}
}

func (o snapOpts) fileURI() bool { return o.major > 8 || (o.major == 8 && o.minor >= 2) }

// outURI and inURI name the snapshot file as a migration target and source.
func (o snapOpts) outURI(path string) string {
	if o.fileURI() {
		return "file:" + path
	}
	return "exec:cat > " + path
}

func (o snapOpts) inURI(path string) string {
	if o.fileURI() {
		return "file:" + path
	}
	return "exec:cat " + path
}

// memObject is the guest RAM backend: memfd as the product's, or a named share=on file for
// x-ignore-shared.
func (o snapOpts) memObject(ramFile string) string {
	if o.ram == "ignore-shared" {
		return "memory-backend-file,id=mem,size=512M,share=on,mem-path=" + ramFile
	}
	return "memory-backend-memfd,id=mem,size=512M,share=on"
}

// setCaps turns on the run's migration capability (both sides must agree).
func (o snapOpts) setCaps(ctx context.Context, q *qmpConn) error {
	c := map[string]string{"mapped-ram": "mapped-ram", "ignore-shared": "x-ignore-shared"}[o.ram]
	if c == "" {
		return nil
	}
	return q.execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": []map[string]any{{"capability": c, "state": true}}}, nil)
}

func snapOptions(b *testing.B) snapOpts {
	b.Helper()
	o := snapOpts{qemu: "qemu-system-x86_64", ram: "stream"}
	if q := os.Getenv("WORKBENCH_BENCH_QEMU"); q != "" {
		o.qemu = q
	}
	o.pciProps = os.Getenv("WORKBENCH_BENCH_VSOCK_PCI_PROPS")
	if r := os.Getenv("WORKBENCH_BENCH_SNAPSHOT_RAM"); r != "" {
		o.ram = r
	}
	out, err := exec.Command(o.qemu, "--version").Output()
	if err != nil {
		b.Fatalf("%s --version: %v", o.qemu, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	f := strings.Fields(strings.TrimPrefix(line, "QEMU emulator version "))
	if len(f) == 0 {
		b.Fatalf("%s --version: %q", o.qemu, line)
	}
	if _, err := fmt.Sscanf(f[0], "%d.%d", &o.major, &o.minor); err != nil {
		b.Fatalf("%s --version: %q: %v", o.qemu, line, err)
	}
	switch o.ram {
	case "stream":
	case "mapped-ram":
		if o.major < 9 {
			b.Skipf("mapped-ram needs QEMU ≥ 9.0; %s is %d.%d", o.qemu, o.major, o.minor)
		}
	case "ignore-shared":
		d, err := os.MkdirTemp("/dev/shm", "wb-snapbench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(d) })
		o.ramDir = d
	default:
		b.Fatalf("WORKBENCH_BENCH_SNAPSHOT_RAM=%q: want stream, mapped-ram or ignore-shared", o.ram)
	}
	b.Logf("QEMU %d.%d (%s), RAM %s, migration URI %s, vsock PCI properties %q", o.major, o.minor, strings.TrimSpace(line), o.ram, strings.SplitN(o.outURI("x"), ":", 2)[0], o.pciProps)
	return o
}

// sparseCopy creates dst at src's size (a hole), then returns the copy of src's data
// extents (SEEK_DATA/SEEK_HOLE, copy_file_range) into it, to run while QEMU maps dst:
// the mapping is MAP_SHARED, so the guest sees the data once the copy is done.
func sparseCopy(src, dst string) (func() error, error) {
	in, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	fi, err := in.Stat()
	if err != nil {
		_ = in.Close()
		return nil, err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		_ = in.Close()
		return nil, err
	}
	if err := out.Truncate(fi.Size()); err != nil {
		_ = in.Close()
		_ = out.Close()
		return nil, err
	}
	return func() error {
		defer func() { _ = in.Close() }()
		defer func() { _ = out.Close() }()
		for off := int64(0); off < fi.Size(); {
			data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
			if errors.Is(err, unix.ENXIO) {
				break
			} else if err != nil {
				return fmt.Errorf("SEEK_DATA %s: %w", src, err)
			}
			hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
			if err != nil {
				return fmt.Errorf("SEEK_HOLE %s: %w", src, err)
			}
			for o := data; o < hole; {
				ro, wo := o, o
				n, err := unix.CopyFileRange(int(in.Fd()), &ro, int(out.Fd()), &wo, int(hole-o), 0)
				if err != nil {
					return fmt.Errorf("copy_file_range %s: %w", src, err)
				}
				if n == 0 {
					return fmt.Errorf("copy_file_range %s: %w", src, io.ErrUnexpectedEOF)
				}
				o += int64(n)
			}
			off = hole
		}
		return out.Close()
	}, nil
}

// snapVM is one QEMU (and vsock device) of the experiment.
type snapVM struct {
	dir       string
	qemu, dev *exec.Cmd
	mon       *qmpConn
}

func (v *snapVM) kill() {
	v.mon.close()
	for _, c := range []*exec.Cmd{v.qemu, v.dev} {
		if c != nil && c.Process != nil {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
}

func startSnapDevice(b *testing.B, devBin, dir, tag string) *exec.Cmd {
	b.Helper()
	vs := filepath.Join(dir, "v"+tag+".sock")
	_ = os.Remove(vs)
	dev := exec.Command(devBin, "--guest-cid="+strconv.Itoa(guestCID), "--socket="+vs, "--uds-path="+filepath.Join(dir, "g"+tag+".sock"))
	dev.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := dev.Start(); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(vs); err == nil {
			return dev
		}
		if time.Now().After(deadline) {
			_ = dev.Process.Kill()
			_ = dev.Wait()
			b.Fatalf("vhost-device-vsock made no socket %s", vs)
		}
	}
}

// startSnapQEMU launches a microvm (the PCIe variant unless product) with extra arguments
// and takes its monitor.
func startSnapQEMU(b *testing.B, o snapOpts, v *snapVM, imageDir string, img *backends.BootImage, ramFile string, product bool, extra ...string) {
	b.Helper()
	khz, err := hostTSCkHz()
	if err != nil {
		b.Fatal(err)
	}
	ms := filepath.Join(v.dir, monitorSock)
	_ = os.Remove(ms)
	ln, err := listenMonitor(ms)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	machine, cmdline := "microvm,accel=tcg,memory-backend=mem,pcie=on", fmt.Sprintf("%s tsc_early_khz=%d pcie_ports=native", img.CommandLine, khz)
	if product {
		machine, cmdline = "microvm,accel=tcg,memory-backend=mem", fmt.Sprintf("%s tsc_early_khz=%d", img.CommandLine, khz)
	}
	args := []string{
		"-machine", machine, "-cpu", "max", "-smp", "1", "-m", "512M",
		"-object", o.memObject(ramFile),
		"-kernel", filepath.Join(imageDir, img.KernelPath), "-initrd", filepath.Join(imageDir, img.InitrdPath),
		"-append", cmdline,
		"-nodefaults", "-no-user-config", "-display", "none", "-nic", "none", "-no-reboot", "-serial", "file:" + filepath.Join(v.dir, "serial-"+strconv.Itoa(int(time.Now().UnixNano()%1e6))+".log"),
		"-fw_cfg", "name=opt/workbench/binding,file=" + filepath.Join(v.dir, bindingName),
		"-chardev", "socket,id=mon0,path=" + ms, "-mon", "chardev=mon0,mode=control",
	}
	if !product {
		args = append(args, "-device", "pcie-root-port,id=rp0,chassis=1,slot=0")
	}
	v.qemu = exec.Command(o.qemu, append(args, extra...)...)
	v.qemu.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out cappedBuffer
	out.max = 4096
	v.qemu.Stdout, v.qemu.Stderr = &out, &out
	if err := v.qemu.Start(); err != nil {
		b.Fatal(err)
	}
	if v.mon, err = acceptMonitor(ln, time.Now().Add(30*time.Second)); err != nil {
		b.Fatalf("%v (QEMU said: %s)", err, out.String())
	}
}

// waitAgent handshakes with binding over the hybrid socket of tag.
func waitAgent(ctx context.Context, dir, tag string, binding protocol.Binding) (*guestclient.Client, error) {
	c, _, err := guestclient.WaitReady(ctx, guestclient.Endpoint{Path: filepath.Join(dir, "g"+tag+".sock"), Hybrid: true}, binding, 10*time.Millisecond)
	return c, err
}

// listenReady creates the ready-hint listener of tag's device, before QEMU starts: as the
// product does, the first CONNECT waits for the guest agent's hint (a host connection that
// reaches vhost-device-vsock before the guest driver set up the vrings can wedge the
// device; internal/guestclient/ready.go).
func listenReady(b *testing.B, dir, tag string) *guestclient.ReadyListener {
	b.Helper()
	r, err := guestclient.ListenReady(filepath.Join(dir, "g"+tag+".sock"), 0)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// waitDriverOK waits until the guest driver of device id set DRIVER_OK (QMP
// x-query-virtio-status; QEMU 7.2 and 10.0 both have it): a hot-plugged device's vrings
// are set up by then. The guest agent sends its ready hint only at boot, so a restore
// waits on this instead before its first CONNECT.
func waitDriverOK(ctx context.Context, q *qmpConn, id string) error {
	return pollQMP(ctx, q, "x-query-virtio-status", map[string]any{"path": "/machine/peripheral/" + id + "/virtio-backend"}, func(m map[string]any) bool {
		st, _ := m["status"].(map[string]any)
		l, _ := st["statuses"].([]any)
		for _, x := range l {
			if s, _ := x.(string); strings.HasPrefix(s, "VIRTIO_CONFIG_S_DRIVER_OK") {
				return true
			}
		}
		return false
	})
}

func snapBinding(b *testing.B, gen int64) protocol.Binding {
	b.Helper()
	nonce, err := newNonce()
	if err != nil {
		b.Fatal(err)
	}
	d := protocol.DigestPrefix + fmt.Sprintf("%064x", 1)
	return protocol.Binding{EnvironmentRef: "bench/snapshot", SourceGeneration: gen, PlanDigest: d, ImageDigest: d, GuestCID: guestCID, BootNonce: nonce}
}

// snapImage is bin/guest (vmEnv), or the image directory WORKBENCH_BENCH_IMAGE_DIR names
// (holding guest/, as make guest-image with GUEST_IMAGE_OUT=<dir>/guest writes it). It
// skips unless the image's agent speaks this tree's guest protocol (the re-bind needs it).
func snapImage(b *testing.B) (string, *backends.BootImage) {
	b.Helper()
	imageDir, img := vmEnv(b)
	if d := os.Getenv("WORKBENCH_BENCH_IMAGE_DIR"); d != "" {
		imageDir = d
	}
	raw, err := os.ReadFile(filepath.Join(imageDir, "guest", "digests.txt"))
	if err != nil {
		b.Skipf("guest/digests.txt: %v", err)
	}
	proto := ""
	for _, l := range strings.Split(string(raw), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[0] == "kernel":
			img.KernelDigest, img.KernelPath = f[1], f[2]
		case len(f) >= 3 && f[0] == "initrd":
			img.InitrdDigest, img.InitrdPath = f[1], f[2]
		case len(f) == 2 && f[0] == "protocol":
			proto = f[1]
		}
	}
	if proto != protocol.SchemaDigest() {
		b.Skipf("the guest image in %s is stale: its agent speaks protocol %q, this tree %s (run make guest-image, or set WORKBENCH_BENCH_IMAGE_DIR)", imageDir, proto, protocol.SchemaDigest())
	}
	return imageDir, img
}

// pollQMP repeats cmd until done says so (bounded).
func pollQMP(ctx context.Context, q *qmpConn, cmd string, args any, done func(map[string]any) bool) error {
	for {
		var out map[string]any
		if err := q.execute(ctx, cmd, args, &out); err != nil {
			return err
		}
		if done(out) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last %v)", cmd, ctx.Err(), out)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// productRefusal asks this QEMU to migrate the product's machine (microvm, virtio-mmio,
// vhost-user-vsock-device), started with its vCPUs stopped (-S: the refusal does not
// depend on the guest), and to unplug its vsock device; it returns QEMU's exact answers.
func productRefusal(b *testing.B, o snapOpts, devBin, imageDir string, img *backends.BootImage, dir string) (migrate, blocked, unplug string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := &snapVM{dir: dir}
	defer v.kill()
	v.dev = startSnapDevice(b, devBin, dir, "p")
	defer removeRAM(o.ramPath("product.ram"))
	startSnapQEMU(b, o, v, imageDir, img, o.ramPath("product.ram"), true, "-S",
		"-chardev", "socket,id=vsock0,path="+filepath.Join(dir, "vp.sock"), "-device", "vhost-user-vsock-device,chardev=vsock0,id=vs0")
	target := filepath.Join(dir, "refused.mig")
	defer func() { _ = os.Remove(target) }()
	if err := v.mon.execute(ctx, "migrate", map[string]any{"uri": o.outURI(target)}, nil); err != nil {
		migrate = err.Error()
	} else {
		migrate = "accepted"
	}
	var q struct {
		Status  string   `json:"status"`
		Blocked []string `json:"blocked-reasons"`
	}
	if err := v.mon.execute(ctx, "query-migrate", nil, &q); err == nil {
		blocked = strings.Join(q.Blocked, " | ")
		if q.Status != "" {
			blocked += " (status " + q.Status + ")"
		}
	}
	if err := v.mon.execute(ctx, "device_del", map[string]any{"id": "vs0"}, nil); err != nil {
		unplug = err.Error()
	} else {
		unplug = "accepted"
	}
	return migrate, blocked, unplug
}

// BenchmarkSnapshotRestoreToAgentReady: launch → guest agent ready for (a) a cold boot of
// the PCIe microvm with the vsock device, (b) the product's own bare boot (FloorBoot, the
// microvm the product runs) and (c) a restore of a snapshot of a booted, handshaken
// template guest: QEMU -incoming, the migration stream loaded, a fresh vsock device
// hot-plugged, the template's agent re-bound with a fresh nonce and the next generation
// (guestclient.Rebind), and a handshake with the new binding. All with the same QEMU
// (WORKBENCH_BENCH_QEMU). p50 of WORKBENCH_BENCH_SNAPSHOTS (default 5) interleaved rounds;
// reports restore/cold ratios (goal ≤ 0.25) and the restore's phases. It first records
// QEMU's exact refusal to migrate or unplug the product's virtio-mmio vsock device.
func BenchmarkSnapshotRestoreToAgentReady(b *testing.B) {
	imageDir, img := snapImage(b)
	o := snapOptions(b)
	devBin := filepath.Join(imageDir, "guest", "vhost-device-vsock")
	rounds := 5
	if n, err := strconv.Atoi(os.Getenv("WORKBENCH_BENCH_SNAPSHOTS")); err == nil && n > 0 {
		rounds = n
	}
	cfg := testConfig(b, imageDir)
	cfg.QEMUBinary = o.qemu
	bk, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		if d := os.Getenv("WORKBENCH_BENCH_KEEP_DIR"); d != "" { // keep the serial logs and the snapshot for a post-mortem
			dir = d
		}
		tmpl := snapBinding(b, 1)
		bj, _ := jsonBinding(tmpl)
		if err := os.WriteFile(filepath.Join(dir, bindingName), bj, 0o400); err != nil {
			b.Fatal(err)
		}
		mig, blocked, unplug := productRefusal(b, o, devBin, imageDir, img, dir)
		b.Logf("the product's machine: migrate: %s; query-migrate: %s; device_del: %s", mig, blocked, unplug)
		snapshot := filepath.Join(dir, "template.mig")
		tmplRAM := o.ramPath("template.ram")

		// The template: boot, handshake, unplug the vsock device, stop, migrate to a file.
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			v := &snapVM{dir: dir}
			defer v.kill()
			v.dev = startSnapDevice(b, devBin, dir, "t")
			ready := listenReady(b, dir, "t")
			defer func() { _ = ready.Close() }()
			startSnapQEMU(b, o, v, imageDir, img, tmplRAM, false, "-chardev", "socket,id=vsock0,path="+filepath.Join(dir, "vt.sock"),
				"-device", o.vsockDevice("vsock0", "vs0"))
			if err := ready.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			c, err := waitAgent(ctx, dir, "t", tmpl)
			if err != nil {
				b.Fatal(err)
			}
			_ = c.Close()
			refused := filepath.Join(dir, "refused.mig")
			if err := v.mon.execute(ctx, "migrate", map[string]any{"uri": o.outURI(refused)}, nil); err == nil {
				b.Fatal("QEMU migrated a guest with a vhost-user vsock device attached")
			} else {
				b.Logf("with the vsock device attached, %v", err)
			}
			_ = os.Remove(refused)
			if err := v.mon.execute(ctx, "device_del", map[string]any{"id": "vs0"}, nil); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			for {
				var props []struct {
					Name string `json:"name"`
				}
				if err := v.mon.execute(ctx, "qom-list", map[string]any{"path": "/machine/peripheral"}, &props); err != nil {
					b.Fatal(err)
				}
				gone := true
				for _, p := range props {
					gone = gone && p.Name != "vs0"
				}
				if gone {
					break
				}
				if ctx.Err() != nil {
					b.Fatal("the guest did not release the vsock device")
				}
				time.Sleep(50 * time.Millisecond)
			}
			b.Logf("template: the guest released the vsock device %v after device_del (pciehp's 5 s button delay)", time.Since(t0).Round(10*time.Millisecond))
			if err := v.mon.execute(ctx, "stop", nil, nil); err != nil {
				b.Fatal(err)
			}
			if err := o.setCaps(ctx, v.mon); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := v.mon.execute(ctx, "migrate", map[string]any{"uri": o.outURI(snapshot)}, nil); err != nil {
				b.Fatal(err)
			}
			if err := pollQMP(ctx, v.mon, "query-migrate", nil, func(m map[string]any) bool {
				if m["status"] == "failed" {
					b.Fatalf("migration failed: %v", m)
				}
				return m["status"] == "completed"
			}); err != nil {
				b.Fatal(err)
			}
			b.Logf("template: migrated to %s in %v", snapshot, time.Since(t1).Round(time.Millisecond))
		}()
		if fi, err := os.Stat(snapshot); err == nil {
			var st unix.Stat_t
			_ = unix.Stat(snapshot, &st)
			b.ReportMetric(float64(st.Blocks*512)/(1<<20), "snapshot-MiB")
			b.Logf("snapshot: %d bytes apparent, %d allocated", fi.Size(), st.Blocks*512)
		}
		if o.ram == "ignore-shared" {
			var st unix.Stat_t
			if err := unix.Stat(tmplRAM, &st); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(st.Blocks*512)/(1<<20), "template-ram-MiB")
		}

		var cold, floor, restore []time.Duration
		phases := map[string][]time.Duration{}
		coldFailed, restoreFailed := 0, 0
		for r := 0; r < rounds; r++ {
			// (a) cold boot of the same machine.
			if err := func() error {
				ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
				defer cancel()
				v := &snapVM{dir: dir}
				defer v.kill()
				ram := o.ramPath("cold.ram")
				defer removeRAM(ram)
				start := time.Now()
				v.dev = startSnapDevice(b, devBin, dir, "c")
				ready := listenReady(b, dir, "c")
				defer func() { _ = ready.Close() }()
				startSnapQEMU(b, o, v, imageDir, img, ram, false, "-chardev", "socket,id=vsock0,path="+filepath.Join(dir, "vc.sock"),
					"-device", o.vsockDevice("vsock0", "vs0"))
				if err := ready.Wait(ctx); err != nil {
					return err
				}
				c, err := waitAgent(ctx, dir, "c", tmpl)
				if err != nil {
					return err
				}
				cold = append(cold, time.Since(start))
				_ = c.Close()
				return nil
			}(); err != nil {
				coldFailed++
				b.Logf("round %d: cold boot: no agent within %v: %v", r, roundTimeout, err)
			}
			// (b) the product's bare boot, same QEMU.
			floor = append(floor, bareBoot(b, bk, img, b.TempDir()))
			// (c) restore.
			if err := func() error {
				ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
				defer cancel()
				v := &snapVM{dir: dir}
				defer v.kill()
				tag := "r" + strconv.Itoa(r)
				ram := o.ramPath(tag + ".ram")
				defer removeRAM(ram)
				mark := map[string]time.Duration{}
				start := time.Now()
				copied := make(chan error, 1)
				if o.ram == "ignore-shared" {
					// The RAM copy runs while QEMU starts; the stream is loaded only after it.
					run, err := sparseCopy(tmplRAM, ram)
					if err != nil {
						return err
					}
					go func() { copied <- run() }()
				} else {
					copied <- nil
				}
				startSnapQEMU(b, o, v, imageDir, img, ram, false, "-incoming", "defer")
				mark["qemu-up"] = time.Since(start)
				if err := <-copied; err != nil {
					return err
				}
				if o.ram == "ignore-shared" {
					mark["ram-copied"] = time.Since(start)
				}
				if err := o.setCaps(ctx, v.mon); err != nil {
					return err
				}
				if err := v.mon.execute(ctx, "migrate-incoming", map[string]any{"uri": o.inURI(snapshot)}, nil); err != nil {
					return err
				}
				if err := pollQMP(ctx, v.mon, "query-status", nil, func(m map[string]any) bool { return m["status"] != "inmigrate" }); err != nil {
					return err
				}
				mark["loaded"] = time.Since(start)
				v.dev = startSnapDevice(b, devBin, dir, tag)
				// The chardev is added only now: a vhost-user chardev connected before the
				// incoming migration hung QEMU 7.2's main loop at device_add (docs).
				if err := v.mon.execute(ctx, "chardev-add", map[string]any{"id": "vsock1", "backend": map[string]any{"type": "socket",
					"data": map[string]any{"addr": map[string]any{"type": "unix", "data": map[string]any{"path": filepath.Join(dir, "v"+tag+".sock")}}, "server": false}}}, nil); err != nil {
					return err
				}
				if err := v.mon.execute(ctx, "cont", nil, nil); err != nil {
					return err
				}
				if err := v.mon.execute(ctx, "device_add", o.vsockDeviceAdd("vsock1", "vs1"), nil); err != nil {
					return err
				}
				mark["device-added"] = time.Since(start)
				if err := waitDriverOK(ctx, v.mon, "vs1"); err != nil {
					return err
				}
				mark["driver-ok"] = time.Since(start)
				c, err := waitAgent(ctx, dir, tag, tmpl)
				if err != nil {
					return err
				}
				mark["agent-answers"] = time.Since(start)
				next := snapBinding(b, 2)
				if _, err := c.Rebind(ctx, "rebind-"+tag, next); err != nil {
					return err
				}
				c, err = waitAgent(ctx, dir, tag, next)
				if err != nil {
					return err
				}
				took := time.Since(start)
				_ = c.Close()
				// The template's binding no longer answers: a restored guest never answers as its template.
				if old, err := guestclient.Connect(ctx, guestclient.Endpoint{Path: filepath.Join(dir, "g"+tag+".sock"), Hybrid: true}, tmpl); err == nil {
					_ = old.Close()
					return errors.New("the restored guest still answers the template's binding after the re-bind")
				}
				restore = append(restore, took)
				for k, d := range mark {
					phases[k] = append(phases[k], d)
				}
				b.Logf("round %d: restore: ram copied %v, QEMU up %v, stream loaded %v, device added %v, driver ok %v, agent answers %v, re-bound and ready %v", r,
					mark["ram-copied"].Round(time.Millisecond), mark["qemu-up"].Round(time.Millisecond), mark["loaded"].Round(time.Millisecond),
					mark["device-added"].Round(time.Millisecond), mark["driver-ok"].Round(time.Millisecond), mark["agent-answers"].Round(time.Millisecond), took.Round(time.Millisecond))
				return nil
			}(); err != nil {
				restoreFailed++
				b.Logf("round %d: restore: %v", r, err)
			}
		}
		b.ReportMetric(float64(coldFailed), "cold-pcie-failed")
		b.ReportMetric(float64(restoreFailed), "restore-failed")
		b.Logf("cold (PCIe microvm) %v, cold (product microvm, FloorBoot) %v, restore %v; failed rounds: %d cold, %d restore", cold, floor, restore, coldFailed, restoreFailed)
		if len(cold) == 0 || len(restore) == 0 {
			b.Fatalf("no successful round to compare (%d cold and %d restore rounds failed)", coldFailed, restoreFailed)
		}
		for k, ds := range phases {
			b.ReportMetric(msOf(p50(ds)), "restore-"+k+"-p50-ms")
		}
		b.ReportMetric(msOf(p50(cold)), "cold-pcie-p50-ms")
		b.ReportMetric(msOf(p50(floor)), "cold-product-p50-ms")
		b.ReportMetric(msOf(p50(restore)), "restore-p50-ms")
		b.ReportMetric(float64(p50(restore))/float64(p50(cold)), "restore/cold-pcie")
		b.ReportMetric(float64(p50(restore))/float64(p50(floor)), "restore/cold-product")
	}
}

package qemumicrovm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/guestenv"
	"sensorium.dev/workbench/internal/guestclient"

	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary a crash-test helper: it allocates one VM with a fresh
// Backend, prints "allocated", and blocks until it is killed (a real agent crash).
const helperEnv = "WORKBENCH_QEMU_HELPER"

type helperInput struct {
	Config Config
	Spec   backends.Spec
}

func TestMain(m *testing.M) {
	guestenv.MaybeRunRelay() // the PTY benchmark runs this binary as the guest PTY relay
	if in := os.Getenv(helperEnv); in != "" {
		os.Exit(helperMain(in))
	}
	os.Exit(m.Run())
}

func helperMain(in string) int {
	var h helperInput
	if err := json.Unmarshal([]byte(in), &h); err != nil {
		fmt.Println("helper:", err)
		return 2
	}
	b, err := New(h.Config)
	if err != nil {
		fmt.Println("helper:", err)
		return 2
	}
	st, err := b.Allocate(context.Background(), h.Spec)
	if err != nil {
		fmt.Println("helper:", err)
		return 1
	}
	fmt.Printf("allocated generation %d\n", st.Generation)
	select {} // until SIGKILL
}

// repoBin is the repository's bin/ (the image directory of a checkout).
func repoBin(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "bin")
}

// vmBackend is a backend with testConfig over the guest image (vmEnv: skips without it).
func vmBackend(t testing.TB) (*Backend, *backends.BootImage) {
	t.Helper()
	imageDir, img := vmEnv(t)
	b, err := New(testConfig(t, imageDir))
	if err != nil {
		t.Fatal(err)
	}
	return b, img
}

// vmEnv skips unless the guest image, QEMU and the vsock device are present, and returns
// the boot image of bin/guest (digests from digests.txt).
func vmEnv(t testing.TB) (imageDir string, img *backends.BootImage) {
	t.Helper()
	if os.Getenv("WORKBENCH_SKIP_VM") == "1" {
		t.Skip("WORKBENCH_SKIP_VM=1")
	}
	if runtime.GOARCH != "amd64" {
		t.Skipf("the guest image is x86_64; this is %s", runtime.GOARCH)
	}
	bin := repoBin(t)
	for _, f := range []string{"vmlinux", "initramfs.cpio", "vhost-device-vsock", "digests.txt"} {
		if _, err := os.Stat(filepath.Join(bin, "guest", f)); err != nil {
			t.Skipf("bin/guest/%s missing: run `make guest-image` first (%v)", f, err)
		}
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skipf("qemu-system-x86_64 not found (installed by `make guest-image`): %v", err)
	}
	img = &backends.BootImage{Variant: "qemu-microvm-x86-64"}
	f, err := os.Open(filepath.Join(bin, "guest", "digests.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	readDigests(t, f, img)
	if img.KernelPath == "" || img.InitrdPath == "" {
		t.Fatalf("digests.txt names no kernel or initrd")
	}
	return bin, img
}

// readDigests fills img from a guest image's digests.txt (hack/guest-image writes it): the
// kernel, initrd and disk digests and paths and the kernel command line; other lines are
// passed over.
func readDigests(t testing.TB, r io.Reader, img *backends.BootImage) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) >= 3 && fs[0] == "kernel":
			img.KernelDigest, img.KernelPath = fs[1], fs[2]
		case len(fs) >= 3 && fs[0] == "initrd":
			img.InitrdDigest, img.InitrdPath = fs[1], fs[2]
		case len(fs) >= 3 && fs[0] == "disk":
			img.DiskDigest, img.DiskPath = fs[1], fs[2]
		case len(fs) >= 2 && fs[0] == "cmdline":
			img.CommandLine = strings.Join(fs[1:], " ")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// testConfig is a TCG configuration with a fresh state directory; whatever a test leaves
// running there (a failed test, a killed helper) is swept when the test ends.
func testConfig(t testing.TB, imageDir string) Config {
	cfg := Config{StateDir: t.TempDir(), ImageDir: imageDir, VhostDeviceVsock: filepath.Join(imageDir, "guest", "vhost-device-vsock"), Accel: AccelTCG}
	t.Cleanup(func() {
		if b, err := New(cfg); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = b.Recover(ctx, nil)
		}
	})
	return cfg
}

func testSpec(id string, img *backends.BootImage) backends.Spec {
	return backends.Spec{ID: id, Ref: "ns/" + id, Generation: 1, Roots: []backends.Root{{Name: "repo"}}, Boot: img}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// noVMProcesses fails unless no QEMU or vsock device process names dir.
func noVMProcesses(t *testing.T, b *Backend, dir string) {
	t.Helper()
	left, err := scanOwned(dir, []string{b.qemuBin, b.devBin})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("processes remain for %s: %v", dir, left)
	}
}

func gone(t *testing.T, ids ...ProcIdentity) {
	t.Helper()
	for _, id := range ids {
		h, err := openExact(id)
		if err != nil {
			t.Fatal(err)
		}
		if h != nil {
			h.close()
			t.Fatalf("%s still runs", id)
		}
	}
}

func teardown(t *testing.T, b *Backend, spec backends.Spec) {
	t.Helper()
	st, err := b.Teardown(ctxT(t, 60*time.Second), spec)
	if err != nil || st.Phase != backends.PhaseClosed || len(st.Residue) > 0 {
		t.Fatalf("teardown: %+v %v", st, err)
	}
	if _, err := os.Lstat(b.dir(spec.ID)); !errors.Is(err, os.ErrNotExist) {
		ents, _ := os.ReadDir(b.dir(spec.ID))
		t.Fatalf("VM directory remains after teardown (%v): %v", err, ents)
	}
	noVMProcesses(t, b, b.vmsDir)
}

// TestBootHandshakeTeardown boots a real guest under TCG, checks the channel and the
// guest's device set from the inside, checks that a second Allocate is idempotent, and
// that teardown leaves no process, socket or file.
func TestBootHandshakeTeardown(t *testing.T) {
	b, img := vmBackend(t)
	spec := testSpec("env-boot", img)
	start := time.Now()
	st, err := b.Allocate(ctxT(t, 90*time.Second), spec)
	if err != nil {
		t.Fatalf("allocate: %v", err)
	}
	t.Logf("allocate → handshake: %v (%s)", time.Since(start).Round(time.Millisecond), st.Message)
	if st.Phase != backends.PhaseReady || st.Generation != 1 || len(st.Roots) != 1 || st.Roots[0].GuestDir != "repo" || st.Roots[0].Path != "" {
		t.Fatalf("status: %+v", st)
	}
	info, _ := b.Info(spec.ID)

	// The record is complete, the binding file is read-only, the sockets are pinned.
	rec, err := readRecord(b.dir(spec.ID))
	if err != nil || rec.State != StateRunning || rec.QEMU == nil || rec.Device == nil || len(rec.Sockets) != 2 || rec.Accel != AccelTCG {
		t.Fatalf("record: %+v %v", rec, err)
	}
	// Read-only, owned by root, readable by the VMM's group only; the directory is
	// root:<vmm gid> 01770 (the VMM creates its sockets, cannot replace the agent's files).
	var bst, dst unix.Stat_t
	if err := unix.Stat(filepath.Join(b.dir(spec.ID), bindingName), &bst); err != nil || bst.Mode&0o7777 != 0o440 || bst.Uid != 0 || bst.Gid != DefaultVMMUID {
		t.Fatalf("binding file: mode %o uid %d gid %d: %v", bst.Mode&0o7777, bst.Uid, bst.Gid, err)
	}
	if err := unix.Stat(b.dir(spec.ID), &dst); err != nil || dst.Mode&0o7777 != 0o1770 || dst.Uid != 0 || dst.Gid != DefaultVMMUID {
		t.Fatalf("VM directory: mode %o uid %d gid %d: %v", dst.Mode&0o7777, dst.Uid, dst.Gid, err)
	}
	// Both VMM processes run as the unprivileged VMM uid with no capability.
	for _, pid := range []int{rec.QEMU.Pid, rec.Device.Pid} {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", DefaultVMMUID, DefaultVMMUID, DefaultVMMUID, DefaultVMMUID), "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000"} {
			if !strings.Contains(string(status), want) {
				t.Errorf("process %d lacks %q:\n%s", pid, want, status)
			}
		}
	}
	if !strings.Contains(rec.CommandLine, "tsc_early_khz=") {
		t.Logf("no tsc_early_khz on this host: %q", rec.CommandLine)
	}

	// Idempotent: a second Allocate (and Start) boots nothing.
	st2, err := b.Allocate(ctxT(t, 30*time.Second), spec)
	if err != nil || st2.Generation != 1 {
		t.Fatalf("second allocate: %+v %v", st2, err)
	}
	if info2, _ := b.Info(spec.ID); info2.QEMU != info.QEMU || info2.Device != info.Device {
		t.Fatalf("second allocate launched again: %+v then %+v", info, info2)
	}
	if st3, err := b.Start(ctxT(t, 30*time.Second), spec); err != nil || st3.Phase != backends.PhaseReady {
		t.Fatalf("start: %+v %v", st3, err)
	}

	// Inspect goes through the channel.
	ist, err := b.Inspect(ctxT(t, 30*time.Second), spec)
	if err != nil || ist.Phase != backends.PhaseReady || ist.Generation != 1 {
		t.Fatalf("inspect: %+v %v", ist, err)
	}
	t.Log(ist.Message)

	c, err := b.Guest(ctxT(t, 10*time.Second), spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 60*time.Second)
	gi, err := c.Inspect(ctx, "")
	if err != nil || strings.Join(gi.NetInterfaces, ",") != "lo" {
		t.Fatalf("guest inspect: %+v %v", gi, err)
	}
	run := func(argv ...string) string {
		t.Helper()
		res, err := c.Spawn(ctx, "", protocol.SpawnArgs{Argv: argv, Env: []string{"PATH=/bin"}, Cwd: "repo", TimeoutMS: 20000, OutputMax: 64 << 10})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v: %+v %v", argv, res, err)
		}
		return string(res.Stdout)
	}
	if out := run("/bin/busybox", "uname", "-a"); !strings.HasPrefix(out, "Linux workbench-guest ") {
		t.Fatalf("uname: %q", out)
	}
	if nets := strings.Fields(run("/bin/busybox", "ls", "/sys/class/net")); strings.Join(nets, ",") != "lo" {
		t.Fatalf("/sys/class/net: %v", nets)
	}
	if pwd := strings.TrimSpace(run("/bin/busybox", "pwd")); pwd != "/workspace/repo" {
		t.Fatalf("cwd of the root: %q", pwd)
	}
	// virtio devices the guest sees: the vsock device (and the rng device).
	devs := run("/bin/busybox", "sh", "-c", "cat /sys/bus/virtio/devices/*/device")
	t.Logf("virtio device ids in the guest: %q", strings.Fields(devs))
	for _, id := range strings.Fields(devs) {
		switch id {
		case "0x0013", "0x0004": // vsock, entropy
		default:
			t.Fatalf("unexpected virtio device %s in the guest (no NIC, no block, no 9p)", id)
		}
	}
	_ = c.Close()

	if w, _ := b.Info(spec.ID); w.SerialBytes == 0 || w.SerialBytes > DefaultSerialMaxBytes {
		t.Fatalf("serial capture of %d bytes (want 1..%d)", w.SerialBytes, DefaultSerialMaxBytes)
	} else {
		t.Logf("diagnostic serial: %d bytes captured (never logged)", w.SerialBytes)
	}
	if fi, err := os.Stat(filepath.Join(b.dir(spec.ID), serialLog)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("serial log: %v %v", fi, err)
	}
	if rss, err := procRSS(info.QEMU.Pid); err == nil {
		t.Logf("QEMU RSS %d KiB", rss)
	}

	teardown(t, b, spec)
	gone(t, info.QEMU, info.Device)
	// Teardown is idempotent.
	if st, err := b.Teardown(ctxT(t, 10*time.Second), spec); err != nil || st.Phase != backends.PhaseClosed {
		t.Fatalf("second teardown: %+v %v", st, err)
	}
	if _, err := b.Guest(ctxT(t, 5*time.Second), spec.ID); actuation.CodeOf(err) != actuation.CodeVMNotRunning {
		t.Fatalf("guest after teardown: %v", err)
	}
}

// TestGenerationAdvancesOnReboot: a VM whose QEMU died is replaced by a new boot with the
// next generation and a new nonce; the old nonce is refused by the new guest.
func TestGenerationAdvancesOnReboot(t *testing.T) {
	b, img := vmBackend(t)
	spec := testSpec("env-gen", img)
	if _, err := b.Allocate(ctxT(t, 90*time.Second), spec); err != nil {
		t.Fatal(err)
	}
	first, _ := readRecord(b.dir(spec.ID))
	info, _ := b.Info(spec.ID)
	// The VM dies underneath (QEMU killed from outside).
	if _, err := killExact(info.QEMU, killWait); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.Inspect(ctxT(t, 10*time.Second), spec); st.Phase != backends.PhaseFailed {
		t.Fatalf("inspect of a dead VM: %+v", st)
	}
	st, err := b.Allocate(ctxT(t, 90*time.Second), spec)
	if err != nil || st.Generation != 2 || st.Phase != backends.PhaseReady {
		t.Fatalf("reboot: %+v %v", st, err)
	}
	second, _ := readRecord(b.dir(spec.ID))
	if second.Binding.BootNonce == first.Binding.BootNonce || second.Binding.SourceGeneration != 2 {
		t.Fatalf("second boot binding %+v, first %+v", second.Binding, first.Binding)
	}
	gone(t, info.QEMU, info.Device) // the first boot's device was killed too
	// The first boot's binding is refused by the new guest.
	v := b.get(spec.ID)
	stale := first.Binding
	if _, err := connectWith(ctxT(t, 10*time.Second), v, stale); guestclient.GuestCode(err) == "" {
		t.Fatalf("stale binding: %v", err)
	}
	teardown(t, b, spec)
}

// TestCrashRecovery kills a real owner process (the test binary re-executed as a helper)
// mid-boot and after boot, then recovers with a new Backend: adoption only of an exact
// match, quarantine or termination otherwise, and never an orphan process.
func TestCrashRecovery(t *testing.T) {
	imageDir, img := vmEnv(t)
	cfg := testConfig(t, imageDir)

	crash := func(t *testing.T, spec backends.Spec, until func(*Record) bool) *Record {
		t.Helper()
		in, _ := json.Marshal(helperInput{Config: cfg, Spec: spec})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+string(in))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Wait() }()
		dir := filepath.Join(cfg.StateDir, "vms", spec.ID)
		deadline := time.Now().Add(90 * time.Second)
		for {
			if rec, err := readRecord(dir); err == nil && until(rec) {
				break
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				t.Fatal("the helper never reached the crash point")
			}
			time.Sleep(2 * time.Millisecond) // test-only polling of the record file
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		rec, err := readRecord(dir)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	// recoverAfterCrash runs Recover on a new backend over the crashed state, with spec's
	// environment known to the agent or not.
	recoverAfterCrash := func(t *testing.T, spec backends.Spec, known bool) (*Backend, []backends.RecoveryAction) {
		t.Helper()
		b, _ := New(cfg)
		var envs map[string]backends.Spec
		if known {
			envs = map[string]backends.Spec{spec.ID: {ID: spec.ID}}
		}
		acts, err := b.Recover(ctxT(t, 60*time.Second), envs)
		if err != nil {
			t.Fatal(err)
		}
		return b, acts
	}
	midBoot := func(r *Record) bool { return r.State == StateLaunching && r.QEMU != nil }
	booted := func(r *Record) bool { return r.State == StateRunning }

	t.Run("booted/known→recovered", func(t *testing.T) {
		spec := testSpec("env-r1", img)
		rec := crash(t, spec, booted)
		b, acts := recoverAfterCrash(t, spec, true)
		t.Logf("recovery: %+v", acts)
		if len(acts) != 1 || acts[0].Outcome != OutcomeRecovered {
			t.Fatalf("actions: %+v", acts)
		}
		info, ok := b.Info(spec.ID)
		if !ok || info.QEMU != *rec.QEMU || info.Generation != rec.Generation {
			t.Fatalf("adopted %+v, record %+v", info, rec)
		}
		if st, err := b.Inspect(ctxT(t, 30*time.Second), spec); err != nil || st.Phase != backends.PhaseReady || st.Generation != 1 {
			t.Fatalf("inspect after adoption: %+v %v", st, err)
		}
		// Allocate keeps the adopted boot (same generation, same processes).
		if st, err := b.Allocate(ctxT(t, 30*time.Second), spec); err != nil || st.Generation != 1 {
			t.Fatalf("allocate after adoption: %+v %v", st, err)
		}
		teardown(t, b, spec)
		gone(t, *rec.QEMU, *rec.Device)
	})
	t.Run("booted/unknown→terminated", func(t *testing.T) {
		spec := testSpec("env-r2", img)
		rec := crash(t, spec, booted)
		b, acts := recoverAfterCrash(t, spec, false)
		if len(acts) != 1 || acts[0].Outcome != OutcomeTerminated {
			t.Fatalf("actions: %+v", acts)
		}
		gone(t, *rec.QEMU, *rec.Device)
		noVMProcesses(t, b, b.vmsDir)
		if _, err := os.Lstat(b.dir(spec.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("directory of an unknown environment remains: %v", err)
		}
	})
	t.Run("mid-boot/known→quarantined", func(t *testing.T) {
		spec := testSpec("env-r3", img)
		rec := crash(t, spec, midBoot)
		b, acts := recoverAfterCrash(t, spec, true)
		t.Logf("recovery: %+v", acts)
		want := OutcomeQuarantined
		if rec.State == StateRunning { // the boot finished before the kill landed
			want = OutcomeRecovered
		}
		if len(acts) != 1 || acts[0].Outcome != want {
			t.Fatalf("actions (record state %s): %+v", rec.State, acts)
		}
		if want == OutcomeQuarantined {
			gone(t, *rec.QEMU)
			noVMProcesses(t, b, b.vmsDir)
			tomb, err := readRecord(b.dir(spec.ID))
			if err != nil || tomb.State != StateStopped {
				t.Fatalf("tombstone: %+v %v", tomb, err)
			}
			// The next boot advances the generation.
			st, err := b.Allocate(ctxT(t, 90*time.Second), spec)
			if err != nil || st.Generation != rec.Generation+1 {
				t.Fatalf("boot after quarantine: %+v %v", st, err)
			}
		}
		teardown(t, b, spec)
	})
	t.Run("mid-boot/unknown→terminated", func(t *testing.T) {
		spec := testSpec("env-r4", img)
		rec := crash(t, spec, midBoot)
		b, acts := recoverAfterCrash(t, spec, false)
		if len(acts) != 1 || acts[0].Outcome != OutcomeTerminated {
			t.Fatalf("actions: %+v", acts)
		}
		gone(t, *rec.QEMU)
		noVMProcesses(t, b, b.vmsDir)
	})
}

// TestAcceleratorProbe: "auto" reports hardware-vm only if a probe VM booted under KVM.
// On these hosts /dev/kvm cannot run a stock kernel, so the answer is TCG / emulated-vm.
func TestAcceleratorProbe(t *testing.T) {
	imageDir, _ := vmEnv(t)
	cfg := testConfig(t, imageDir)
	cfg.Accel = AccelAuto
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c, err := b.Capability()
	if err != nil {
		t.Fatal(err)
	}
	accel, reason, _ := b.Accelerator(context.Background())
	t.Logf("accel %s (%s) in %v; capability %+v", accel, reason, time.Since(start).Round(time.Millisecond), c)
	switch {
	case accel == AccelKVM && c.IsolationClass == "hardware-vm" && c.PlatformRef == "linux-kvm-x86_64":
	case accel == AccelTCG && c.IsolationClass == "emulated-vm" && c.PlatformRef == "linux-tcg-x86_64":
	default:
		t.Fatalf("accel %s with capability %+v", accel, c)
	}
	// No working-disk pool here: only the minimal variant is offered (process-runtime, no
	// full-system claim); systemProfile's full-system side is TestQEMUFullSystemEnvironment's.
	if c.SystemFidelity != "process-runtime" || c.HostFilesystemSharing != "denied" || !slices.Equal(c.NetworkProfiles, []string{"none"}) ||
		!slices.Equal(c.DeviceClasses, []string{"diagnostic-serial", "virtio-rng", "virtio-vsock"}) || c.BinaryDigest == "" {
		t.Fatalf("capability %+v", c)
	}
	// The answer is remembered, and the probe left nothing behind.
	if a2, r2, _ := b.Accelerator(context.Background()); a2 != accel || r2 != reason {
		t.Fatalf("second answer %s (%s)", a2, r2)
	}
	if _, err := os.Lstat(filepath.Join(b.vmsDir, probeDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("probe directory remains: %v", err)
	}
	noVMProcesses(t, b, b.vmsDir)
}

// TestRefusals: malformed or unverifiable specs are refused with a code, launching nothing.
func TestRefusals(t *testing.T) {
	b, img := vmBackend(t)
	bad := func(mut func(*backends.Spec)) backends.Spec {
		s := testSpec("env-bad", img)
		cp := *img
		s.Boot = &cp
		mut(&s)
		return s
	}
	for name, c := range map[string]struct {
		spec backends.Spec
		code string
	}{
		"host path root":  {bad(func(s *backends.Spec) { s.Roots = []backends.Root{{Name: "repo", HostPath: "/etc"}} }), string(actuation.CodeRootInvalid)},
		"source root":     {bad(func(s *backends.Spec) { s.Roots = []backends.Root{{Name: "repo", Source: "/etc"}} }), string(actuation.CodeRootInvalid)},
		"no image":        {bad(func(s *backends.Spec) { s.Boot = nil }), string(actuation.CodeImageInvalid)},
		"escaping kernel": {bad(func(s *backends.Spec) { s.Boot.KernelPath = "../../etc/passwd" }), string(actuation.CodeImageInvalid)},
		"absolute kernel": {bad(func(s *backends.Spec) { s.Boot.KernelPath = "/etc/passwd" }), string(actuation.CodeImageInvalid)},
		"missing kernel":  {bad(func(s *backends.Spec) { s.Boot.KernelPath = "guest/nope" }), string(actuation.CodeImageInvalid)},
		"wrong digest": {bad(func(s *backends.Spec) {
			s.Boot.InitrdDigest = "sha256:" + strings.Repeat("0", 64)
		}), string(actuation.CodeDigestMismatch)},
		"too much memory": {bad(func(s *backends.Spec) { s.MemoryMiB = 1 << 20 }), string(actuation.CodeResourcesAboveMax)},
		"too many vCPUs":  {bad(func(s *backends.Spec) { s.VCPUs = 1024 }), string(actuation.CodeResourcesAboveMax)},
		"bad ID":          {bad(func(s *backends.Spec) { s.ID = "../x" }), string(actuation.CodeEnvironmentIDInvalid)},
		"control bytes":   {bad(func(s *backends.Spec) { s.Boot.CommandLine = "console=ttyS0\ninit=/bin/sh" }), string(actuation.CodeImageInvalid)},
	} {
		t.Run(name, func(t *testing.T) {
			st, err := b.Allocate(ctxT(t, 30*time.Second), c.spec)
			if string(actuation.CodeOf(err)) != c.code || st.Phase != backends.PhaseFailed {
				t.Fatalf("got %+v, %v; want code %s", st, err, c.code)
			}
			noVMProcesses(t, b, b.vmsDir)
		})
	}
}

// TestQEMUArgs: the device set is closed: no NIC, no disk, no share, no monitor.
func TestQEMUArgs(t *testing.T) {
	b := &Backend{cfg: Config{}}
	rec := &Record{Accel: AccelTCG, VCPUs: 2, MemoryMiB: 768, CommandLine: "console=ttyS0"}
	args := strings.Join(b.qemuArgs("/s/vms/x", rec), " ")
	for _, want := range []string{"-nodefaults", "-nic none", "-monitor none", "-display none", "-no-reboot", "-smp 2", "-m 768M",
		"memory-backend-memfd,id=mem,size=768M,share=on", "vhost-user-vsock-device", "virtio-rng-device", "-sandbox on",
		"-kernel /dev/fd/3", "-initrd /dev/fd/4", "name=opt/workbench/binding,file=/s/vms/x/binding.json"} {
		if !strings.Contains(args, want) {
			t.Errorf("missing %q in %s", want, args)
		}
	}
	for _, deny := range []string{"-netdev", "-drive", "-fsdev", "virtfs", "virtio-net", "9p", "-blockdev", "-qmp", "stdio"} {
		if strings.Contains(args, deny) {
			t.Errorf("%q in %s", deny, args)
		}
	}
}

func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			_, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb, err
		}
	}
	return 0, errors.New("no VmRSS")
}

func connectWith(ctx context.Context, v *vm, b protocol.Binding) (*guestclient.Client, error) {
	c, err := guestclient.Connect(ctx, v.endpoint(), b)
	if err == nil {
		_ = c.Close()
	}
	return c, err
}

// TestSerialCapped: the diagnostic serial keeps at most its cap and counts the rest.
func TestSerialCapped(t *testing.T) {
	dir := t.TempDir()
	s, err := listenSerial(filepath.Join(dir, serialSock), filepath.Join(dir, serialLog), 1000)
	if err != nil {
		t.Fatal(err)
	}
	go s.serve(time.Now().Add(10 * time.Second))
	c, err := net.Dial("unix", filepath.Join(dir, serialSock))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(bytes.Repeat([]byte("x"), 5000)); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	<-s.done
	w, d := s.stats()
	fi, err := os.Stat(filepath.Join(dir, serialLog))
	if err != nil || w != 1000 || d != 4000 || fi.Size() != 1000 {
		t.Fatalf("written %d dropped %d file %v %v", w, d, fi, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, serialSock)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the serial listener socket remains after its one connection: %v", err)
	}
}

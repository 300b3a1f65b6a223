package guestclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

// TestMicroVMBoot boots the image of `make guest-image` once under QEMU microvm with
// vhost-device-vsock (the way FACTS.md measured it), reaches the agent through the
// hybrid-vsock socket with this package, and checks the guest from the inside. It skips,
// saying why, when the image, QEMU or the vsock device is missing, or when
// WORKBENCH_SKIP_VM=1.
func TestMicroVMBoot(t *testing.T) {
	if os.Getenv("WORKBENCH_SKIP_VM") == "1" {
		t.Skip("WORKBENCH_SKIP_VM=1")
	}
	if runtime.GOARCH != "amd64" {
		t.Skipf("the guest image is x86_64; this is %s", runtime.GOARCH)
	}
	_, file, _, _ := runtime.Caller(0)
	img := filepath.Join(filepath.Dir(file), "..", "..", "bin", "guest")
	for _, f := range []string{"vmlinux", "initramfs.cpio", "vhost-device-vsock"} {
		if _, err := os.Stat(filepath.Join(img, f)); err != nil {
			t.Skipf("bin/guest/%s missing: run `make guest-image` first (%v)", f, err)
		}
	}
	if d, err := os.ReadFile(filepath.Join(img, "digests.txt")); err != nil || !strings.Contains(string(d), "\nprotocol "+protocol.SchemaDigest()+"\n") {
		t.Skipf("bin/guest is stale: its digests.txt does not name this tree's protocol %s (run make guest-image)", protocol.SchemaDigest())
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skipf("qemu-system-x86_64 not found (installed by `make guest-image`): %v", err)
	}
	accel := "tcg" // these hosts' /dev/kvm cannot run a stock guest kernel (FACTS.md)
	if a := os.Getenv("WORKBENCH_VM_ACCEL"); a != "" {
		accel = a
	}

	dir := t.TempDir()
	b := testBinding()
	b.EnvironmentRef = "default/vm-boot"
	b.SourceGeneration = 1
	bj, _ := json.Marshal(b)
	bindingFile := filepath.Join(dir, "binding.json")
	if err := os.WriteFile(bindingFile, bj, 0o400); err != nil {
		t.Fatal(err)
	}
	vhostSock, udsPath := filepath.Join(dir, "vhost.sock"), filepath.Join(dir, "vm.vsock")

	dev := exec.Command(filepath.Join(img, "vhost-device-vsock"), "--guest-cid=3", "--socket="+vhostSock, "--uds-path="+udsPath)
	devLog := &bytes.Buffer{}
	dev.Stdout, dev.Stderr = devLog, devLog
	dev.Env = append(os.Environ(), "RUST_LOG=warn")
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dev.Process.Kill()
		_ = dev.Wait()
	})
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(vhostSock); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("vhost-device-vsock did not create its socket: %s", devLog)
		}
	}

	// The guest's readiness hint arrives here; no CONNECT is made before it (see
	// ReadyListener).
	ready, err := ListenReady(udsPath, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ready.Close() }()

	cmdline := "console=ttyS0 panic=-1 quiet"
	if accel == "tcg" {
		// Under TCG the guest reads the host's TSC. microvm has no HPET or PM timer, so
		// when the PIT calibration fails on a busy host the kernel marks the TSC unstable
		// and hangs early in boot (seen in about 1 of 6 boots here). Giving it the host's
		// TSC frequency skips that calibration (50 of 50 boots).
		if khz, err := hostTSCkHz(); err == nil {
			cmdline += fmt.Sprintf(" tsc_early_khz=%d", khz)
		} else {
			t.Logf("no host TSC frequency (%v): booting without tsc_early_khz", err)
		}
	}

	serial := filepath.Join(dir, "serial.log")
	args := []string{
		"-machine", "microvm,accel=" + accel + ",memory-backend=mem", "-cpu", "max", "-smp", "1", "-m", "512M",
		"-object", "memory-backend-memfd,id=mem,size=512M,share=on",
		"-kernel", filepath.Join(img, "vmlinux"), "-initrd", filepath.Join(img, "initramfs.cpio"),
		"-append", cmdline,
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-chardev", "socket,id=char0,path=" + vhostSock, "-device", "vhost-user-vsock-device,chardev=char0",
		"-fw_cfg", "name=opt/workbench/binding,file=" + bindingFile,
		"-serial", "file:" + serial,
	}
	vm := exec.Command(qemu, args...)
	vmLog := &bytes.Buffer{}
	vm.Stdout, vm.Stderr = vmLog, vmLog
	launched := time.Now()
	if err := vm.Start(); err != nil {
		t.Fatal(err)
	}
	vmDone := make(chan error, 1)
	go func() { vmDone <- vm.Wait() }()
	t.Cleanup(func() {
		_ = vm.Process.Kill()
		<-vmDone //nolint:errcheck // killed: the exit status is "signal: killed"
	})
	dumpSerial := func() {
		s, _ := os.ReadFile(serial)
		if len(s) > 8192 {
			s = s[len(s)-8192:]
		}
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", vm.Process.Pid))
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Logf("qemu (wchan %q): %s\nvhost-device-vsock: %s\nworking dir: %v\nserial (tail):\n%s", wchan, vmLog, devLog, names, s)
	}

	if err := ready.Wait(ctxT(t, 120*time.Second)); err != nil {
		dumpSerial()
		t.Fatalf("no ready signal from the guest: %v", err)
	}
	readyAt := time.Since(launched)
	ep := Endpoint{Path: udsPath, Hybrid: true, Port: DefaultPort}
	c, attempts, err := WaitReady(ctxT(t, 30*time.Second), ep, b, 20*time.Millisecond)
	if err != nil {
		dumpSerial()
		t.Fatalf("guest not reachable: %v", err)
	}
	defer func() { _ = c.Close() }()
	t.Logf("accel=%s: QEMU launch -> ready signal %v -> handshake %v (%d connect attempts)", accel, readyAt.Round(time.Millisecond), time.Since(launched).Round(time.Millisecond), attempts)

	// A stale nonce is refused over the real channel, before any operation.
	stale := b
	stale.BootNonce = newNonce()
	if _, err := Connect(ctxT(t, 10*time.Second), ep, stale); string(GuestCode(err)) != string(actuation.CodeNonceMismatch) {
		t.Fatalf("stale nonce: %v", err)
	}

	ctx := ctxT(t, 60*time.Second)
	info, err := c.Inspect(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest kernel %s, agent %s, pid1 %v, interfaces %v", info.Kernel, info.AgentVersion, info.PID1, info.NetInterfaces)
	if !info.PID1 || strings.Join(info.NetInterfaces, ",") != "lo" {
		t.Fatalf("inspect: %+v", info)
	}

	run := func(argv ...string) string {
		t.Helper()
		res, err := c.Spawn(ctx, "", protocol.SpawnArgs{Argv: argv, Env: []string{"PATH=/bin"}, TimeoutMS: 20000, OutputMax: 64 << 10})
		if err != nil {
			t.Fatalf("%v: %v", argv, err)
		}
		if res.ExitCode != 0 {
			t.Fatalf("%v: exit %d: %s%s", argv, res.ExitCode, res.Stdout, res.Stderr)
		}
		return string(res.Stdout)
	}
	start := time.Now()
	uname := run("/bin/busybox", "uname", "-a")
	t.Logf("uname -a: %s(spawn round trip %v)", uname, time.Since(start).Round(time.Millisecond))
	if !strings.HasPrefix(uname, "Linux workbench-guest ") {
		t.Fatalf("uname: %q", uname)
	}
	if nets := strings.Fields(run("/bin/busybox", "ls", "/sys/class/net")); strings.Join(nets, ",") != "lo" {
		t.Fatalf("inside the guest /sys/class/net holds %v, want only lo", nets)
	}
	mounts := run("/bin/busybox", "cat", "/proc/mounts")
	for _, fs := range []string{"9p", "virtiofs", "nfs", "fuse"} {
		if strings.Contains(mounts, " "+fs+" ") {
			t.Fatalf("a host share is mounted:\n%s", mounts)
		}
	}

	// File mechanics in the guest root (/workspace).
	content := []byte("hello from the host\n")
	st, err := c.StagePatch(ctx, "", "note.txt", content)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ApplyPatch(ctx, "", protocol.ApplyArgs{Ref: st.Ref, Target: "note.txt", Base: protocol.BaseAbsent}); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.ReadFile(ctx, "", protocol.ReadArgs{Path: "note.txt", Max: 1024}); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("read back %q: %v", got, err)
	}

	// PTY round trip inside the VM.
	if _, err := c.PTYOpen(ctx, "", protocol.PTYOpenArgs{SessionID: "tty", Argv: []string{"/bin/busybox", "cat"}, Rows: 24, Cols: 80}); err != nil {
		t.Fatal(err)
	}
	ptyStart := time.Now()
	if _, err := c.PTYInput(ctx, "", "tty", []byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for off := uint64(0); !bytes.Contains(out, []byte("ping\r\nping\r\n")); {
		d, b, err := c.PTYRead(ctx, "", protocol.PTYReadArgs{SessionID: "tty", Offset: off, Max: 4096, WaitMS: 5000})
		if err != nil {
			t.Fatal(err)
		}
		out, off = append(out, b...), d.Next
	}
	t.Logf("PTY echo round trip in the VM: %v", time.Since(ptyStart).Round(time.Millisecond))

	if rss, err := vmRSS(vm.Process.Pid); err == nil {
		t.Logf("QEMU RSS %s", rss)
	}

	// Rebind in the real guest (vsock CID, fw_cfg boot input): the open PTY is closed, the
	// boot binding's nonce is refused from then on, the new binding serves.
	next := b
	next.EnvironmentRef, next.SourceGeneration, next.BootNonce = "team-a/claimer", b.SourceGeneration+1, newNonce()
	rb, err := c.Rebind(ctx, "", next)
	if err != nil {
		t.Fatal(err)
	}
	if rb.SessionsClosed != 1 || rb.BootID != info.BootID {
		t.Fatalf("rebind in the VM answered %+v", rb)
	}
	oldNonce := next
	oldNonce.BootNonce = b.BootNonce
	if _, err := Connect(ctxT(t, 10*time.Second), ep, oldNonce); string(GuestCode(err)) != string(actuation.CodeNonceMismatch) {
		t.Fatalf("the boot nonce after a rebind: %v", err)
	}
	if c, err = Connect(ctxT(t, 10*time.Second), ep, next); err != nil {
		t.Fatalf("connect with the new binding: %v", err)
	}
	if got := run("/bin/busybox", "cat", "note.txt"); got != string(content) {
		t.Fatalf("after the rebind note.txt reads %q", got)
	}

	// Shutdown powers the guest off; QEMU exits by itself.
	if err := c.Shutdown(ctx, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-vmDone:
		vmDone <- err
		if err != nil {
			dumpSerial()
			t.Fatalf("QEMU exit after guest poweroff: %v", err)
		}
	case <-time.After(60 * time.Second):
		dumpSerial()
		t.Fatal("QEMU still running 60s after the guest was asked to power off")
	}
}

// hostTSCkHz reads the host's TSC frequency from /proc/cpuinfo ("cpu MHz" of a host
// whose TSC is constant and of known frequency).
func hostTSCkHz() (int64, error) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0, err
	}
	s := string(b)
	if !strings.Contains(s, " constant_tsc") {
		return 0, fmt.Errorf("host TSC is not constant")
	}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			var mhz float64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%f", &mhz); err != nil || mhz <= 0 {
				return 0, fmt.Errorf("cpu MHz %q", v)
			}
			return int64(mhz * 1000), nil
		}
	}
	return 0, fmt.Errorf("no cpu MHz in /proc/cpuinfo")
}

func vmRSS(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:")), nil
		}
	}
	return "", fmt.Errorf("no VmRSS")
}

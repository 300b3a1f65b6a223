package qemumicrovm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/cgroups"
)

// vm is a VM this process runs: booted by it, or adopted from an exact record match.
type vm struct {
	dir  string
	rec  *Record
	qemu *procHandle
	dev  *procHandle
	// qemuDone and devDone close once this process reaped its own child (nil when adopted:
	// the pidfds tell the exit then).
	qemuDone, devDone <-chan struct{}
	serial            *serialSink
	// mon is the VM's QMP monitor (qmp.go; nil when adopted until monitorOf re-acquires
	// it). Whether the VM is paused is the kernel's state of its QEMU (stoppedNow).
	mon *qmpConn
	// holding refuses new guest channels while a pause holds the VM (pause.go).
	// Guarded by Backend.mu.
	holding bool
}

// alive reports whether both processes still run (as the recorded incarnations: the
// pidfds were proven against the recorded start times).
func (v *vm) alive() bool {
	if v.qemu == nil || v.dev == nil || isClosed(v.qemuDone) || isClosed(v.devDone) {
		return false
	}
	return !v.qemu.exited() && !v.dev.exited()
}

// stoppedNow reports whether the VM's QEMU process is stopped (paused, pause.go).
func (v *vm) stoppedNow() bool {
	if v.qemu == nil {
		return false
	}
	s, err := stopped(v.qemu.id.Pid)
	return err == nil && s
}

// endpoint is the guest channel, pinned to the recorded socket identity.
func (v *vm) endpoint() guestclient.Endpoint {
	p := filepath.Join(v.dir, guestSock)
	id := v.rec.socket(p)
	return guestclient.Endpoint{Path: p, Hybrid: true, Port: guestclient.DefaultPort, Dev: id.Dev, Ino: id.Ino}
}

// commandLine is the variant's kernel command line plus, under TCG, the host's TSC
// frequency: microvm has no HPET or PM timer, so when the PIT calibration fails on a busy
// host the guest kernel marks the TSC unstable and hangs early in boot (about 1 boot in 6
// on these machines; 0 of 50 with tsc_early_khz).
func commandLine(variant, accel string) string {
	if accel != AccelTCG {
		return variant
	}
	khz, err := hostTSCkHz()
	if err != nil {
		return variant
	}
	return strings.TrimSpace(variant + " tsc_early_khz=" + strconv.FormatInt(khz, 10))
}

// hostTSCkHz reads the host's TSC frequency ("cpu MHz" of a host whose TSC is constant).
func hostTSCkHz() (int64, error) {
	b, err := readBounded("/proc/cpuinfo", 4<<20)
	if err != nil {
		return 0, err
	}
	s := string(b)
	if !strings.Contains(s, " constant_tsc") {
		return 0, errors.New("host TSC is not constant")
	}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || mhz <= 0 {
				return 0, fmt.Errorf("cpu MHz %q", v)
			}
			return int64(mhz * 1000), nil
		}
	}
	return 0, errors.New("no cpu MHz in /proc/cpuinfo")
}

// qemuArgs is the closed QEMU command line: microvm, the plan's memory and vCPUs on a
// shared memfd (vhost-user needs it), kernel and initrd from the verified open files
// (/dev/fd/3, /dev/fd/4), no default devices, no NIC, no display, no monitor, no reboot,
// QEMU's seccomp sandbox, vhost-user vsock, virtio-rng, the serial chardev to the broker's
// listener, and the binding as a read-only fw_cfg file.
func (b *Backend) qemuArgs(dir string, rec *Record) []string {
	cpu := "max"
	if rec.Accel == AccelKVM {
		cpu = "host"
	}
	mem := strconv.Itoa(int(rec.MemoryMiB)) + "M"
	args := []string{
		"-machine", "microvm,accel=" + rec.Accel + ",memory-backend=mem",
		"-cpu", cpu, "-smp", strconv.Itoa(int(rec.VCPUs)), "-m", mem,
		"-object", "memory-backend-memfd,id=mem,size=" + mem + ",share=on",
		"-kernel", "/dev/fd/3", "-initrd", "/dev/fd/4", "-append", rec.CommandLine,
		"-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none", "-nic", "none", "-no-reboot",
		"-chardev", "socket,id=vsock0,path=" + filepath.Join(dir, vhostSock), "-device", "vhost-user-vsock-device,chardev=vsock0",
		"-chardev", "socket,id=serial0,path=" + filepath.Join(dir, serialSock), "-serial", "chardev:serial0",
		"-fw_cfg", "name=opt/workbench/binding,file=" + filepath.Join(dir, bindingName),
		"-chardev", "socket,id=mon0,reconnect=1,path=" + filepath.Join(dir, monitorSock), "-mon", "chardev=mon0,mode=control", // qmp.go
	}
	if rec.Disk != nil {
		// The working disk: raw, stated (no probing, no backing file), from the descriptor
		// the node agent opened (an fd set: QEMU opens no host path for it), virtio-blk.
		args = append(args, "-add-fd", "fd="+strconv.Itoa(diskFD)+",set=1", "-add-fd", "fd="+strconv.Itoa(diskROFD)+",set=1",
			"-drive", "file=/dev/fdset/1,format=raw,if=none,id=disk0,cache=writeback,discard=unmap,werror=report,rerror=report",
			"-device", "virtio-blk-device,drive=disk0")
	}
	if !b.cfg.NoRNG {
		args = append(args, "-object", "rng-random,id=rng0,filename=/dev/urandom", "-device", "virtio-rng-device,rng=rng0")
	}
	if !b.cfg.NoSandbox {
		args = append(args, "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny")
	}
	return args
}

// boot launches a new VM for spec: a fresh nonce, generation max(spec, previous+1).
func (b *Backend) boot(ctx context.Context, spec backends.Spec, p *plan) (*vm, error) {
	accel, _, err := b.accelerator(ctx)
	if err != nil {
		return nil, err
	}
	p.Accel = accel
	b.mu.Lock()
	if len(b.vms)+b.booting >= b.cfg.MaxVMs {
		n := len(b.vms) + b.booting
		b.mu.Unlock()
		return nil, actuation.Refusef(actuation.CodeVMCapReached, "this node runs %d VMs (at most %d)", n, b.cfg.MaxVMs)
	}
	b.booting++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.booting--
		b.mu.Unlock()
	}()
	files, err := b.openBoot(p.img, true)
	if err != nil {
		return nil, err
	}
	defer files.Close()
	dir := b.dir(spec.ID)
	var prevGen int64
	var prevDisk *DiskRef
	if prev, err := readRecord(dir); err == nil {
		prevGen, prevDisk = prev.Generation, prev.Disk
	}
	var disk *DiskRef
	if err := checkSources(spec, p, prevDisk); err != nil {
		return nil, err
	}
	if p.img.DiskPath != "" {
		if cleared, err := b.clearInterruptedFill(spec.ID); err != nil {
			return nil, err
		} else if cleared {
			prevDisk = nil // the half-filled disk is gone: clone and fill again (sources.go)
		}
		base, err := b.openDiskBase(p.img)
		if err != nil {
			return nil, err
		}
		files.disk, disk, err = b.workingDisk(spec.ID, base, p.img.DiskDigest, p.DiskBytes, prevDisk)
		_ = base.Close()
		if err != nil {
			return nil, err
		}
		if fresh := prevDisk == nil || prevDisk.Ino != disk.Ino || prevDisk.Birth != disk.Birth; fresh {
			if err := b.fillDisk(ctx, spec, disk); err != nil {
				b.deleteDisk(spec.ID, false)
				return nil, err
			}
		}
		if files.diskRO, err = readOnlyTwin(files.disk); err != nil {
			return nil, err
		}
	}
	gen := max(spec.Generation, prevGen+1, 1)
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	ref := spec.Ref
	if ref == "" {
		ref = spec.ID
	}
	rec := &Record{ID: spec.ID, Ref: ref, State: StateLaunching, Generation: gen,
		Binding: protocol.Binding{EnvironmentRef: ref, SourceGeneration: gen, PlanDigest: p.digest(), ImageDigest: imageDigest(p.img),
			GuestCID: guestCID, BootNonce: nonce},
		SpecPlanDigest: spec.PlanDigest, Accel: accel, VCPUs: p.VCPUs, MemoryMiB: p.MemoryMiB, Variant: p.img.Variant,
		Kernel: FileRef{Path: p.img.KernelPath, Digest: p.img.KernelDigest}, Initrd: FileRef{Path: p.img.InitrdPath, Digest: p.img.InitrdDigest},
		CommandLine: guestLimits(commandLine(p.img.CommandLine, accel), disk, p.PIDs), Devices: p.Devices, Disk: disk}
	timeout := b.cfg.BootTimeout
	if disk != nil {
		timeout = b.cfg.SystemBootTimeout
	}
	v, err := b.launch(ctx, dir, rec, files, timeout, p.Roots)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.vms[spec.ID] = v
	b.mu.Unlock()
	return v, nil
}

// launch runs one boot in dir: record (launching), binding file, vsock device, listeners,
// QEMU, ready signal, handshake, guest roots, record (running). Every step that creates
// something is recorded before the next one; on failure everything launched is killed,
// the working files are removed and a stopped tombstone keeps the generation.
func (b *Backend) launch(ctx context.Context, dir string, rec *Record, files *bootFiles, timeout time.Duration, roots []string) (*vm, error) {
	if err := os.MkdirAll(b.vmsDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", b.vmsDir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("VM directory %s is not a directory", dir)
	}
	// Leftovers of an earlier boot of this environment (its processes were stopped).
	if _, err := b.killAll(dir, nil, nil); err != nil {
		return nil, err
	}
	if left, err := clearDir(dir, true); err != nil {
		return nil, fmt.Errorf("clear VM directory %s: %w", dir, err)
	} else if len(left) > 0 {
		return nil, fmt.Errorf("VM directory %s holds unrecognised entries %v", dir, left)
	}
	if err := writeRecord(dir, rec); err != nil {
		return nil, err
	}
	bj, err := json.Marshal(rec.Binding)
	if err != nil {
		return nil, fmt.Errorf("encode binding: %w", err)
	}
	if err := writeFileAtomic(dir, bindingName, bj, 0o400); err != nil {
		return nil, err
	}
	// The VMM processes run as an unprivileged uid (vmm.go): they reach the VM directory
	// through a descriptor, may create their sockets in it (sticky: never replace the
	// agent's files) and read the binding.
	id := b.vmmIdentity()
	if err := shareWithVMM(dir, id, 0o1770, bindingName); err != nil {
		return nil, err
	}
	dirFile, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open VM directory %s: %w", dir, err)
	}
	defer func() { _ = dirFile.Close() }()
	v := &vm{dir: dir, rec: rec}
	cg, cgErr := b.vmCgroup(dir, rec) // QEMU and the vsock device are born in the VM's cgroup
	var qemuOut, devOut cappedBuffer
	qemuOut.max, devOut.max = 8<<10, 8<<10
	fail := func(code string, err error) (*vm, error) {
		said := ""
		if s := qemuOut.String(); s != "" {
			said += " (QEMU said: " + s + ")"
		}
		if s := devOut.String(); s != "" {
			said += " (vhost-device-vsock said: " + s + ")"
		}
		procs, perr := b.killAll(dir, rec, v)
		files, ferr := clearDir(dir, true)
		rec.State, rec.Reason = StateStopped, protocol.Truncate(code+": "+err.Error()+said+teardownNote(procs, perr, files, ferr))
		_ = writeRecord(dir, rec)
		return nil, actuation.Wrapf(actuation.Code(code), err, "boot of generation %d under %s%s", rec.Generation, rec.Accel, protocol.Truncate(said))
	}
	if cgErr != nil {
		return fail(string(actuation.CodeCgroupUnavailable), cgErr)
	}
	bootCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := bootCtx.Deadline()

	// 1. The vsock device; QEMU connects to its vhost-user socket.
	vs, gs := filepath.Join(dir, vhostSock), filepath.Join(dir, guestSock)
	w, err := watchDir(dir)
	if err != nil {
		return fail(string(actuation.CodeBootFailed), err)
	}
	defer w.close()
	devDir := "/proc/self/fd/3" // ExtraFiles[0]: the VM directory
	dev := exec.Command(b.devBin, "--guest-cid="+strconv.Itoa(guestCID), "--socket="+filepath.Join(devDir, vhostSock), "--uds-path="+filepath.Join(devDir, guestSock))
	dev.Dir, dev.Env = "/", []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "RUST_LOG=warn", vmDirEnv + "=" + dir}
	dev.Stdout, dev.Stderr = &devOut, &devOut
	dev.ExtraFiles = []*os.File{dirFile}
	if v.dev, v.devDone, err = startProc(dev, cg, id, false); err != nil {
		return fail(string(actuation.CodeBootFailed), fmt.Errorf("start vhost-device-vsock: %w", err))
	}
	rec.Device = &v.dev.id
	if err := writeRecord(dir, rec); err != nil {
		return fail(string(actuation.CodeBootFailed), err)
	}
	if err := w.waitFor(bootCtx, vs, v.devDone); err != nil {
		return fail(bootCode(ctx, err), fmt.Errorf("vhost-device-vsock socket: %w", err))
	}

	// 2. The ready listener (the guest's one-shot hint) and the serial listener, both
	// before QEMU starts.
	ready, err := guestclient.ListenReady(gs, protocol.ReadyPort)
	if err != nil {
		return fail(string(actuation.CodeBootFailed), err)
	}
	defer func() { _ = ready.Close() }()
	if v.serial, err = listenSerial(filepath.Join(dir, serialSock), filepath.Join(dir, serialLog), b.cfg.SerialMaxBytes); err != nil {
		return fail(string(actuation.CodeBootFailed), fmt.Errorf("serial listener: %w", err))
	}
	mon, err := listenMonitor(filepath.Join(dir, monitorSock)) // qmp.go
	if err != nil {
		return fail(string(actuation.CodeBootFailed), err)
	}
	defer func() { _ = mon.Close() }()
	// The VMM processes connect to the three listeners.
	if err := shareWithVMM("", id, 0, ready.Path(), filepath.Join(dir, serialSock), filepath.Join(dir, monitorSock)); err != nil {
		return fail(string(actuation.CodeBootFailed), err)
	}
	go v.serial.serve(deadline)

	// 3. QEMU.
	q := exec.Command(b.qemuBin, b.qemuArgs("/proc/self/fd/5", rec)...) // ExtraFiles[2]: the VM directory
	q.Dir, q.Env = "/", []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", vmDirEnv + "=" + dir}
	q.Stdout, q.Stderr = &qemuOut, &qemuOut
	q.ExtraFiles = []*os.File{files.kernel, files.initrd, dirFile}
	if files.disk != nil {
		q.ExtraFiles = append(q.ExtraFiles, files.disk, files.diskRO) // fds 6 and 7: diskFD, diskROFD
	}
	if v.qemu, v.qemuDone, err = startProc(q, cg, id, true); err != nil {
		return fail(string(actuation.CodeBootFailed), fmt.Errorf("start QEMU: %w", err))
	}
	rec.QEMU, rec.LaunchedAt = &v.qemu.id, time.Now().UTC()
	if err := writeRecord(dir, rec); err != nil {
		return fail(string(actuation.CodeBootFailed), err)
	}
	if v.mon, err = acceptMonitor(mon, deadline); err != nil {
		return fail(string(actuation.CodeBootFailed), err)
	}
	// A boot ends early when either process exits.
	go func() {
		select {
		case <-v.qemuDone:
		case <-v.devDone:
		case <-bootCtx.Done():
			return
		}
		cancel()
	}()

	// 4. The guest's ready signal, then the handshake with this boot's binding.
	exitedErr := func(err error) error {
		switch {
		case isClosed(v.qemuDone):
			return fmt.Errorf("QEMU exited during boot: %w", err)
		case isClosed(v.devDone):
			return fmt.Errorf("vhost-device-vsock exited during boot: %w", err)
		}
		return err
	}
	if err := ready.Wait(bootCtx); err != nil {
		return fail(bootCode(ctx, exitedErr(err)), exitedErr(err))
	}
	_ = ready.Close()
	gid, err := socketIdentity(gs)
	if err != nil {
		return fail(string(actuation.CodeBootFailed), err)
	}
	vid, err := socketIdentity(vs)
	if err != nil {
		return fail(string(actuation.CodeBootFailed), err)
	}
	rec.Sockets = []SocketIdentity{vid, gid}
	// WaitReady retries the CONNECT while it is refused: hybrid vsock has no other
	// readiness signal than an answered CONNECT (the ready hint may precede the accept).
	c, _, err := guestclient.WaitReady(bootCtx, v.endpoint(), rec.Binding, 20*time.Millisecond)
	if err != nil {
		code := bootCode(ctx, exitedErr(err))
		if guestclient.GuestCode(err) != "" {
			code = string(actuation.CodeBootFailed) // the guest refused this boot's binding
		}
		return fail(code, exitedErr(err))
	}
	if len(roots) > 0 {
		// The roots are directories beneath the guest agent's root; the image provides
		// /bin/mkdir (busybox in the reference image).
		res, err := c.Spawn(bootCtx, "", protocol.SpawnArgs{Argv: append([]string{"/bin/mkdir", "-p"}, roots...), Env: []string{"PATH=/bin"},
			TimeoutMS: 10_000, OutputMax: 4096})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("mkdir exited %d: %s", res.ExitCode, sanitize(append(res.Stdout, res.Stderr...), 256))
		}
		if err != nil {
			_ = c.Close()
			return fail(string(actuation.CodeBootFailed), fmt.Errorf("create the roots in the guest: %w", err))
		}
	}
	_ = c.Close()
	rec.State, rec.ReadyAt = StateRunning, time.Now().UTC()
	if err := writeRecord(dir, rec); err != nil {
		return fail(string(actuation.CodeBootFailed), err)
	}
	return v, nil
}

// bootCode tells a timeout from another boot failure.
func bootCode(parent context.Context, err error) string {
	if errors.Is(err, context.DeadlineExceeded) && parent.Err() == nil {
		return string(actuation.CodeBootTimeout)
	}
	return string(actuation.CodeBootFailed)
}

// startProc starts cmd through the VMM sandbox (vmmsandbox.go) as id, born in g when
// set, opens a pidfd for the child before anything can reap it (so the pid is exact),
// waits until the helper exec'd the program, records its identity, and reaps it in the
// background; done closes then.
func startProc(cmd *exec.Cmd, g *cgroups.Group, id vmmIdentity, ownPID bool) (*procHandle, <-chan struct{}, error) {
	report, err := id.sandboxed(cmd, ownPID)
	if err != nil {
		return nil, nil, err
	}
	start := cmd.Start
	if g != nil {
		start = func() error { return g.StartCmd(cmd) }
	}
	if err := start(); err != nil {
		_ = report.Close()
		_ = cmd.ExtraFiles[len(cmd.ExtraFiles)-1].Close()
		return nil, nil, err
	}
	execErr := awaitExec(cmd, report)
	// Nothing reaps the child before the goroutine below, so the pid stays exact.
	pid := cmd.Process.Pid
	fd, ferr := unix.PidfdOpen(pid, 0)
	pid0, ierr := identify(pid)
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	if err := errors.Join(execErr, ferr, ierr); err != nil {
		_ = cmd.Process.Kill()
		<-done
		if ferr == nil {
			_ = unix.Close(fd)
		}
		return nil, nil, err
	}
	return &procHandle{fd: fd, id: pid0}, done, nil
}

// killAll ends every process of a VM directory: the VM's own handles, the record's exact
// identities, then any process of the configured QEMU or device binary whose command line
// names the directory. It returns the processes that survived.
func (b *Backend) killAll(dir string, rec *Record, v *vm) ([]string, error) {
	if v != nil {
		v.serial.close()
		v.mon.close()
		for _, h := range []*procHandle{v.qemu, v.dev} {
			if h != nil && !h.exited() {
				_ = h.kill(killWait)
			}
		}
	}
	if rec != nil {
		for _, id := range []*ProcIdentity{rec.QEMU, rec.Device} {
			if id != nil {
				_, _ = killExact(*id, killWait)
			}
		}
	}
	others := b.othersOwn(v) // adopt.go: a VM adopted away from dir is not dir's
	stray, err := scanOwned(dir, []string{b.qemuBin, b.devBin})
	if err != nil {
		return nil, err
	}
	for _, id := range stray {
		if !others[id] {
			_, _ = killExact(id, killWait)
		}
	}
	if v != nil {
		// Let this process reap its own children, so none stays a zombie.
		for _, done := range []<-chan struct{}{v.qemuDone, v.devDone} {
			if done != nil {
				select {
				case <-done:
				case <-time.After(killWait):
				}
			}
		}
		v.qemu.close()
		v.dev.close()
	}
	cgLeft := b.removeVMCgroup(dir) // anything else the VMM processes left behind
	left, err := scanOwned(dir, []string{b.qemuBin, b.devBin})
	if err != nil {
		return nil, err
	}
	residue := cgLeft
	for _, id := range left {
		if !others[id] {
			residue = append(residue, fmt.Sprintf("process %s %s", id, id.Exe))
		}
	}
	return residue, nil
}

// workingFile reports whether name is a file this backend creates in a VM directory.
func workingFile(name string) bool {
	switch name {
	case RecordName, bindingName, vhostSock, guestSock, serialSock, serialLog, monitorSock, "core":
		return true
	}
	return strings.HasPrefix(name, guestSock+"_") || strings.HasPrefix(name, tmpPrefix) || strings.HasPrefix(name, "core.")
}

// clearDir removes the working files of a VM directory (keeping the record when
// keepRecord) and, when nothing else is left and the record goes too, the directory. It
// returns the entries it did not recognise (left in place).
func clearDir(dir string, keepRecord bool) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	names, err := f.Readdirnames(maxDirEntries + 1)
	_ = f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var residue []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		if !workingFile(n) {
			residue = append(residue, p)
			continue
		}
		if n == RecordName && keepRecord {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			residue = append(residue, p)
		}
	}
	if len(names) > maxDirEntries {
		residue = append(residue, fmt.Sprintf("%s: more than %d entries", dir, maxDirEntries))
	}
	if !keepRecord && len(residue) == 0 {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return []string{dir}, fmt.Errorf("remove %s: %w", dir, err)
		}
	}
	return residue, nil
}

// stopVM ends a VM this process runs and leaves a stopped tombstone (the generation is
// kept, so the next boot advances it).
func (b *Backend) stopVM(v *vm, reason string) {
	procs, perr := b.killAll(v.dir, v.rec, v)
	files, ferr := clearDir(v.dir, true)
	v.rec.State, v.rec.Reason = StateStopped, protocol.Truncate(reason+teardownNote(procs, perr, files, ferr))
	_ = writeRecord(v.dir, v.rec)
	b.mu.Lock()
	if b.vms[v.rec.ID] == v {
		delete(b.vms, v.rec.ID)
	}
	b.mu.Unlock()
}

// stopRecord is stopVM for a VM known only from its record.
func (b *Backend) stopRecord(rec *Record, reason string) {
	dir := b.dir(rec.ID)
	procs, perr := b.killAll(dir, rec, nil)
	files, ferr := clearDir(dir, true)
	rec.State, rec.Reason = StateStopped, protocol.Truncate(reason+teardownNote(procs, perr, files, ferr))
	_ = writeRecord(dir, rec)
}

// teardownNote is what a stop's killAll and clearDir left behind (surviving processes,
// unremoved files, errors), for the tombstone's reason, so a leak stays visible in the
// record instead of being dropped; "" when nothing was left.
func teardownNote(procs []string, perr error, files []string, ferr error) string {
	left := append(append([]string(nil), procs...), files...)
	for _, err := range []error{perr, ferr} {
		if err != nil {
			left = append(left, err.Error())
		}
	}
	if len(left) == 0 {
		return ""
	}
	return "; teardown left: " + strings.Join(left, ", ")
}

// destroyVM tears a VM down: a guest poweroff (bounded) when graceful, then killAll, then
// every working file, the record and the directory.
func (b *Backend) destroyVM(ctx context.Context, v *vm, graceful bool) ([]string, error) {
	if graceful && v.alive() && !v.stoppedNow() { // a paused guest cannot power off: it does not run
		sctx, cancel := context.WithTimeout(ctx, b.cfg.ShutdownTimeout)
		if c, err := guestclient.Connect(sctx, v.endpoint(), v.rec.Binding); err == nil {
			_ = c.Shutdown(sctx, "") // a lost answer is expected: the guest powers off
			_ = c.Close()
			v.qemu.waitExit(time.Until(deadlineOf(sctx)))
		}
		cancel()
	}
	b.mu.Lock()
	if b.vms[v.rec.ID] == v {
		delete(b.vms, v.rec.ID)
	}
	b.mu.Unlock()
	procs, err := b.killAll(v.dir, v.rec, v)
	if err != nil {
		return procs, err
	}
	files, err := clearDir(v.dir, len(procs) > 0)
	return append(procs, files...), err
}

// destroyDir tears down what a VM directory's record names (no guest poweroff: this
// process does not run the VM).
func (b *Backend) destroyDir(dir string, keepNothing bool) ([]string, error) {
	rec, err := readRecord(dir)
	if err != nil {
		rec = nil
	}
	procs, err := b.killAll(dir, rec, nil)
	if err != nil {
		return procs, err
	}
	files, err := clearDir(dir, len(procs) > 0 || !keepNothing)
	return append(procs, files...), err
}

func deadlineOf(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Now()
	}
	return d
}

// adopt takes over a VM a previous process recorded, only on an exact match: a completed
// boot record, both recorded process incarnations alive running the recorded executables,
// the pinned sockets unchanged, and a handshake with the recorded binding (environment,
// generation, plan and image digests, CID, nonce) that the guest accepts. The adopted boot
// keeps its generation.
func (b *Backend) adopt(ctx context.Context, rec *Record) (*vm, error) {
	if rec.State != StateRunning && rec.State != StateDraining {
		return nil, fmt.Errorf("the record is of an unfinished boot (state %s)", rec.State)
	}
	if rec.QEMU == nil || rec.Device == nil || len(rec.Sockets) == 0 {
		return nil, errors.New("the record lacks process or socket identities")
	}
	if err := rec.Binding.Validate(); err != nil {
		return nil, fmt.Errorf("recorded binding: %w", err)
	}
	if err := checkDisk(rec.Disk); err != nil {
		return nil, err
	}
	dir := b.dir(rec.ID)
	v := &vm{dir: dir, rec: rec}
	var err error
	release := func() {
		v.qemu.close()
		v.dev.close()
	}
	for _, p := range []struct {
		what string
		id   ProcIdentity
		bin  string
		h    **procHandle
	}{{"QEMU", *rec.QEMU, b.qemuBin, &v.qemu}, {"vhost-device-vsock", *rec.Device, b.devBin, &v.dev}} {
		if *p.h, err = openExact(p.id); err != nil {
			release()
			return nil, fmt.Errorf("recorded %s %s: %w", p.what, p.id, err)
		} else if *p.h == nil {
			release()
			return nil, fmt.Errorf("recorded %s %s is gone", p.what, p.id)
		}
		if cur, err := identify(p.id.Pid); err != nil || cur.Exe != p.id.Exe || strings.TrimSuffix(cur.Exe, " (deleted)") != p.bin {
			release()
			return nil, fmt.Errorf("recorded %s %s runs %q, not %q", p.what, p.id, cur.Exe, p.bin)
		}
	}
	for _, s := range rec.Sockets {
		cur, err := socketIdentity(s.Path)
		if err != nil {
			release()
			return nil, fmt.Errorf("recorded socket: %w", err)
		}
		if cur.Dev != s.Dev || cur.Ino != s.Ino || filepath.Dir(s.Path) != dir {
			release()
			return nil, fmt.Errorf("socket %s is not the recorded one (%d:%d, recorded %d:%d)", s.Path, cur.Dev, cur.Ino, s.Dev, s.Ino)
		}
	}
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := guestclient.Connect(actx, v.endpoint(), rec.Binding)
	if err != nil {
		release()
		return nil, fmt.Errorf("handshake with the recorded binding: %w", err)
	}
	_ = c.Close()
	b.mu.Lock()
	b.vms[rec.ID] = v
	b.mu.Unlock()
	return v, nil
}

// dirWatch reports entries created in one directory (inotify), so waiting for a socket
// to appear needs no polling.
type dirWatch struct {
	f      *os.File
	events chan struct{}
}

func watchDir(dir string) (*dirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	w := &dirWatch{f: os.NewFile(uintptr(fd), "inotify"), events: make(chan struct{}, 1)}
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := w.f.Read(buf); err != nil {
				close(w.events)
				return
			}
			select {
			case w.events <- struct{}{}:
			default:
			}
		}
	}()
	return w, nil
}

// waitFor returns once path exists, or fails when ctx ends or exited closes.
func (w *dirWatch) waitFor(ctx context.Context, path string, exited <-chan struct{}) error {
	for {
		if _, err := os.Lstat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errExited
		case _, ok := <-w.events:
			if !ok {
				return errors.New("inotify closed")
			}
		}
	}
}

func (w *dirWatch) close() { _ = w.f.Close() }

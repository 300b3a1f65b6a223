package qemumicrovm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// Pause and resume (issue 13 item 5, docs/vm-pause-snapshot.md). A pause stops the QEMU
// process (SIGSTOP through its pidfd): every vCPU and QEMU's device emulation stand
// still, and memory stays. The vsock device process keeps running, so the guest's
// virtqueues are never stopped: a device (or host) event during the pause lands in the
// rings as it would while the guest is busy, and the guest sees it when it runs again.
// Resume sends SIGCONT and re-handshakes a fresh channel so the caller knows the agent
// answers.
//
// QMP stop (the first implementation) is not used: it also stops the vhost-user vsock
// device's rings (GET_VRING_BASE), and vhost-device-vsock 0.3 (the device this image
// ships) ends its ring worker thread for good when it handles an event while a ring is
// stopped, so the guest then answers no new connection (TestPauseResumeCycles: 9 wedges
// in 95 cycles; gdb showed the worker thread gone). The cost of a process stop: QEMU's
// virtual clock follows the host's, so the guest's clock jumps by the pause when it runs
// again, as after a host that was suspended. A VM a previous agent paused with QMP stop
// is still resumed with cont.

var _ backends.Pauser = (*Backend)(nil)

const (
	// resumeWait bounds the wait for the guest agent's handshake after the resume.
	resumeWait = 30 * time.Second
	// stopWait bounds the wait for the kernel to report QEMU stopped or running again.
	stopWait = 5 * time.Second
	// stopPoll is how often /proc/<pid>/stat is read while waiting for that.
	stopPoll = 2 * time.Millisecond
)

// held refuses a new guest channel of this process while a pause holds the VM
// (environment-paused: the node refuses new work on a paused environment anyway, so only
// racing calls meet this; without it they would wait out their deadlines on a stopped
// guest).
func (b *Backend) held(v *vm) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v.holding {
		return actuation.Refusef(actuation.CodeEnvironmentPaused, "the environment's VM is paused or pausing: no new guest channel")
	}
	return nil
}

// setHold sets whether new guest channels of this process are held off.
func (b *Backend) setHold(v *vm, hold bool) {
	b.mu.Lock()
	v.holding = hold
	b.mu.Unlock()
}

// stopped reports whether every thread of process pid is stopped by a signal (state T
// in /proc/<pid>/task/*/stat: a group stop reaches each thread as it next enters the
// kernel). A thread that ends between the listing and the read is skipped.
func stopped(pid int) (bool, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		st, err := procexec.ReadTaskStat(pid, tid)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err != nil {
			return false, err
		}
		if st.State != 'T' {
			return false, nil
		}
	}
	return len(tasks) > 0, nil
}

// waitStopped waits (bounded by stopWait and ctx) until the kernel reports pid stopped
// (want true) or running again (want false).
func waitStopped(ctx context.Context, pid int, want bool) error {
	bound := time.NewTimer(stopWait)
	defer bound.Stop()
	tick := time.NewTicker(stopPoll)
	defer tick.Stop()
	for {
		got, err := stopped(pid)
		if err != nil {
			return err
		}
		if got == want {
			return nil
		}
		select {
		case <-tick.C:
		case <-bound.C:
			return fmt.Errorf("process %d not %s after %v", pid, map[bool]string{true: "stopped", false: "running"}[want], stopWait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Pause stops the environment's VM (idempotent): SIGSTOP to the recorded QEMU process,
// confirmed by the kernel's state of every one of its threads.
func (b *Backend) Pause(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := b.checkID(spec.ID); err != nil {
		return backends.Status{}, err
	}
	defer b.lock(spec.ID)()
	v := b.get(spec.ID)
	if v == nil || !v.alive() {
		err := actuation.Refusef(actuation.CodeVMNotRunning, "%s: no running VM for this environment", spec.Ref)
		return backends.Status{Phase: backends.PhaseFailed, Message: err.Error()}, err
	}
	b.setHold(v, true)
	fail := func(err error) (backends.Status, error) {
		b.setHold(v, false)
		return backends.Status{Phase: backends.PhaseFailed, Generation: v.rec.Generation, Message: err.Error()}, fmt.Errorf("pause %s: %w", spec.Ref, err)
	}
	if err := v.qemu.signal(unix.SIGSTOP); err != nil {
		return fail(err)
	}
	if err := waitStopped(ctx, v.qemu.id.Pid, true); err != nil {
		_ = v.qemu.signal(unix.SIGCONT)
		return fail(err)
	}
	return backends.Status{Phase: backends.PhasePaused, Generation: v.rec.Generation,
		Message: fmt.Sprintf("guest generation %d paused (QEMU process %d stopped: kernel state T; its vCPUs and devices do not run)", v.rec.Generation, v.qemu.id.Pid)}, nil
}

// Resume lets a paused VM run (idempotent) and waits until its agent answers a handshake
// with this boot's binding. A stopped QEMU is continued whoever stopped it; a VM an
// earlier agent paused with QMP stop is continued with cont; a VM this process booted and
// never paused is not asked.
func (b *Backend) Resume(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := b.checkID(spec.ID); err != nil {
		return backends.Status{}, err
	}
	defer b.lock(spec.ID)()
	v := b.get(spec.ID)
	if v == nil || !v.alive() {
		return backends.Status{Phase: backends.PhaseFailed, Message: string(actuation.CodeVMNotRunning) + ": no VM runs for this environment"},
			actuation.Refusef(actuation.CodeVMNotRunning, "resume %s: no VM runs for this environment", spec.Ref)
	}
	defer b.setHold(v, false) // (serialised with Pause by the ID lock)
	failed := func(err error) (backends.Status, error) {
		return backends.Status{Phase: backends.PhaseFailed, Generation: v.rec.Generation, Message: err.Error()}, fmt.Errorf("resume %s: %w", spec.Ref, err)
	}
	isStopped, err := stopped(v.qemu.id.Pid)
	if err != nil {
		return failed(err)
	}
	b.mu.Lock()
	known := v.mon != nil
	b.mu.Unlock()
	how := ""
	switch {
	case isStopped:
		if err := v.qemu.signal(unix.SIGCONT); err != nil {
			return failed(err)
		}
		if err := waitStopped(ctx, v.qemu.id.Pid, false); err != nil {
			return failed(err)
		}
		how = "QEMU process continued"
	case known:
		// Booted by this process (which never pauses with QMP stop), or its monitor was
		// re-acquired by an earlier resume, and not stopped: running.
		return backends.Status{Phase: backends.PhaseReady, Generation: v.rec.Generation, Message: "running"}, nil
	default: // adopted: an earlier agent may have paused it with QMP stop
		mon, err := b.monitorOf(v)
		if err != nil {
			return failed(err)
		}
		state, err := mon.runState(ctx)
		if err != nil {
			return failed(err)
		}
		if state != "running" {
			if err := mon.execute(ctx, "cont", nil, nil); err != nil {
				return failed(err)
			}
		}
		how = "QEMU query-status: " + state
	}
	wctx, cancel := context.WithTimeout(ctx, resumeWait)
	defer cancel()
	c, _, err := guestclient.WaitReady(wctx, v.endpoint(), v.rec.Binding, 20*time.Millisecond)
	if err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Generation: v.rec.Generation, Message: "resumed; guest agent unreachable: " + err.Error()},
			fmt.Errorf("resume %s: guest agent: %w", spec.Ref, err)
	}
	_ = c.Close()
	return backends.Status{Phase: backends.PhaseReady, Generation: v.rec.Generation,
		Message: fmt.Sprintf("guest generation %d resumed (%s; agent handshake answered)", v.rec.Generation, how)}, nil
}

// RunState is the VM's run state for tests and benchmarks: "paused" while its QEMU
// process is stopped, else QEMU's own account (query-status).
func (b *Backend) RunState(ctx context.Context, id string) (string, error) {
	defer b.lock(id)()
	v := b.get(id)
	if v == nil {
		return "", actuation.Refusef(actuation.CodeVMNotRunning, "no VM runs for environment %s on this node", id)
	}
	if isStopped, err := stopped(v.qemu.id.Pid); err != nil || isStopped {
		return "paused", err
	}
	mon, err := b.monitorOf(v)
	if err != nil {
		return "", err
	}
	return mon.runState(ctx)
}

// monitorOf returns the VM's monitor; for a VM adopted from a previous process it listens
// again and waits (bounded) for QEMU's chardev to reconnect. Called under the ID lock.
func (b *Backend) monitorOf(v *vm) (*qmpConn, error) {
	b.mu.Lock()
	mon := v.mon
	b.mu.Unlock()
	if mon != nil {
		return mon, nil
	}
	path := filepath.Join(v.dir, monitorSock)
	ln, err := listenMonitor(path)
	if err != nil {
		return nil, actuation.Wrapf(actuation.CodeVMNotRunning, err, "QEMU monitor of an adopted VM")
	}
	defer func() { _ = ln.Close() }()
	if err := shareWithVMM("", b.vmmIdentity(), 0, path); err != nil {
		return nil, actuation.Wrapf(actuation.CodeVMNotRunning, err, "QEMU monitor of an adopted VM")
	}
	mon, err = acceptMonitor(ln, time.Now().Add(monitorReconnectWait))
	if err != nil {
		return nil, actuation.Wrapf(actuation.CodeVMNotRunning, err, "QEMU monitor of an adopted VM (its chardev reconnects every second)")
	}
	b.mu.Lock()
	v.mon = mon
	b.mu.Unlock()
	return mon, nil
}

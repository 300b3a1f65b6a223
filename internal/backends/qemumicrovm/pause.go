package qemumicrovm

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Pause and resume (issue 13 item 5, docs/vm-pause-snapshot.md): QMP stop halts the VM's
// vCPUs in place (memory, devices and the vsock device process stay; the guest's clock,
// driven by QEMU's virtual clock, stands still), QMP cont lets them run again. The vsock
// device keeps its connections, so a guest agent stream open across a pause simply waits;
// Resume re-handshakes a fresh channel so the caller knows the agent answers.

var _ backends.Pauser = (*Backend)(nil)

// resumeWait bounds the wait for the guest agent's handshake after cont.
const resumeWait = 30 * time.Second

// The drain before a pause. QMP stop stops the vhost-user vsock device's rings
// (GET_VRING_BASE) with the vCPUs; with the device this image ships (vhost-device-vsock
// 0.3), vsock traffic still moving in the moments before that stop can leave the device
// answering no new connection after cont, for good (TestPauseResumeCycles: about one
// cycle in ten with two command streams running into the pause; none in 60 cycles after
// a drain and settle). So a pause first holds new channels of this process off
// (refused with environment-paused: the node refuses new work on a paused environment
// anyway), waits for the open ones to close, bounded by pauseDrainWait, and lets the
// device settle for pauseSettle after the last one closed. A channel still open at the
// bound (a long guest command) is paused with, and said in the status message.
const (
	pauseDrainWait = 10 * time.Second
	pauseSettle    = 300 * time.Millisecond
)

// openChannel counts a new guest channel of this process, or refuses it while a pause
// drains or holds the VM. The caller calls release once, when the channel closes.
func (b *Backend) openChannel(v *vm) (release func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v.holding {
		return nil, fsaccess.Errorf(CodePaused, "the environment's VM is paused or pausing: no new guest channel")
	}
	if v.open == 0 {
		v.idle = make(chan struct{})
	}
	v.open++
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			v.open--
			v.lastUse = time.Now()
			if v.open == 0 {
				close(v.idle)
			}
		})
	}, nil
}

// channelUsed records that a guest channel of this process closed just now (the
// backend's own, uncounted ones: inspect, quiesce).
func (b *Backend) channelUsed(v *vm) {
	b.mu.Lock()
	v.lastUse = time.Now()
	b.mu.Unlock()
}

// drainChannels holds new channels off and waits until none is open (bounded by
// pauseDrainWait and ctx) and pauseSettle has passed since the last one closed. It
// returns how many remain open.
func (b *Backend) drainChannels(ctx context.Context, v *vm) (int, error) {
	bound := time.NewTimer(pauseDrainWait)
	defer bound.Stop()
	b.mu.Lock()
	v.holding = true
	b.mu.Unlock()
	for {
		b.mu.Lock()
		open, idle, settled := v.open, v.idle, v.lastUse.Add(pauseSettle)
		b.mu.Unlock()
		if open > 0 {
			select {
			case <-idle:
				continue
			case <-bound.C:
				return open, nil
			case <-ctx.Done():
				return open, ctx.Err()
			}
		}
		wait := time.Until(settled)
		if wait <= 0 {
			return 0, nil
		}
		settle := time.NewTimer(wait)
		select {
		case <-settle.C:
		case <-ctx.Done():
			settle.Stop()
			return 0, ctx.Err()
		}
	}
}

// releaseHold lets new channels of this process open again.
func (b *Backend) releaseHold(v *vm) {
	b.mu.Lock()
	v.holding = false
	b.mu.Unlock()
}

// Pause stops the environment's VM (idempotent) and confirms with query-status.
func (b *Backend) Pause(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := b.checkID(spec.ID); err != nil {
		return backends.Status{}, err
	}
	defer b.lock(spec.ID)()
	v, mon, err := b.running(ctx, spec)
	if err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Message: err.Error()}, err
	}
	b.mu.Lock()
	already := v.paused
	b.mu.Unlock()
	open := 0
	if !already {
		if open, err = b.drainChannels(ctx, v); err != nil {
			b.releaseHold(v)
			return backends.Status{}, fmt.Errorf("pause %s: draining guest channels: %w", spec.Ref, err)
		}
	}
	if err := mon.execute(ctx, "stop", nil, nil); err != nil {
		b.releaseHold(v)
		return backends.Status{Phase: backends.PhaseFailed, Generation: v.rec.Generation, Message: err.Error()},
			fmt.Errorf("pause %s: %w", spec.Ref, err)
	}
	state, err := mon.runState(ctx)
	if err != nil {
		return backends.Status{}, fmt.Errorf("pause %s: %w", spec.Ref, err)
	}
	if state != "paused" {
		return backends.Status{}, fmt.Errorf("pause %s: QEMU reports run state %q after stop", spec.Ref, state)
	}
	b.mu.Lock()
	v.paused, v.holding = true, true
	b.mu.Unlock()
	msg := fmt.Sprintf("guest generation %d paused (QEMU query-status: %s)", v.rec.Generation, state)
	if open > 0 {
		msg += fmt.Sprintf("; %d guest channels were still open after %v and were paused with the guest", open, pauseDrainWait)
	}
	return backends.Status{Phase: backends.PhasePaused, Generation: v.rec.Generation, Message: msg}, nil
}

// Resume lets a paused VM run (idempotent) and waits until its agent answers a handshake
// with this boot's binding. A VM this process neither paused nor adopted is not asked.
func (b *Backend) Resume(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := b.checkID(spec.ID); err != nil {
		return backends.Status{}, err
	}
	defer b.lock(spec.ID)()
	v := b.get(spec.ID)
	if v == nil {
		return backends.Status{Phase: backends.PhaseFailed, Message: CodeVMNotRunning + ": no VM runs for this environment"},
			fsaccess.Errorf(CodeVMNotRunning, "resume %s: no VM runs for this environment", spec.Ref)
	}
	defer b.releaseHold(v) // (serialised with Pause by the ID lock)
	b.mu.Lock()
	paused, known := v.paused, v.mon != nil
	b.mu.Unlock()
	if known && !paused {
		// Booted by this process and never paused by it: running.
		return backends.Status{Phase: backends.PhaseReady, Generation: v.rec.Generation, Message: "running"}, nil
	}
	_, mon, err := b.running(ctx, spec)
	if err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Message: err.Error()}, err
	}
	state, err := mon.runState(ctx)
	if err != nil {
		return backends.Status{}, fmt.Errorf("resume %s: %w", spec.Ref, err)
	}
	if state != "running" {
		if err := mon.execute(ctx, "cont", nil, nil); err != nil {
			return backends.Status{Phase: backends.PhaseFailed, Generation: v.rec.Generation, Message: err.Error()},
				fmt.Errorf("resume %s: %w", spec.Ref, err)
		}
		if state, err = mon.runState(ctx); err != nil {
			return backends.Status{}, fmt.Errorf("resume %s: %w", spec.Ref, err)
		}
	}
	b.mu.Lock()
	v.paused = false
	b.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, resumeWait)
	defer cancel()
	c, _, err := guestclient.WaitReady(wctx, v.endpoint(), v.rec.Binding, 20*time.Millisecond)
	if err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Generation: v.rec.Generation, Message: "resumed; guest agent unreachable: " + err.Error()},
			fmt.Errorf("resume %s: guest agent: %w", spec.Ref, err)
	}
	_ = c.Close()
	return backends.Status{Phase: backends.PhaseReady, Generation: v.rec.Generation,
		Message: fmt.Sprintf("guest generation %d resumed (QEMU query-status: %s; agent handshake answered)", v.rec.Generation, state)}, nil
}

// RunState is QEMU's own account of the VM's run state (query-status), for tests and
// benchmarks.
func (b *Backend) RunState(ctx context.Context, id string) (string, error) {
	defer b.lock(id)()
	v := b.get(id)
	if v == nil {
		return "", fsaccess.Errorf(CodeVMNotRunning, "no VM runs for environment %s on this node", id)
	}
	mon, err := b.monitorOf(v)
	if err != nil {
		return "", err
	}
	return mon.runState(ctx)
}

// running returns the environment's live VM and its monitor.
func (b *Backend) running(ctx context.Context, spec backends.Spec) (*vm, *qmpConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	v := b.get(spec.ID)
	if v == nil || !v.alive() {
		return nil, nil, fsaccess.Errorf(CodeVMNotRunning, "%s: no running VM for this environment", spec.Ref)
	}
	mon, err := b.monitorOf(v)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", spec.Ref, err)
	}
	return v, mon, nil
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
		return nil, fsaccess.Wrap(CodeVMNotRunning, err, "QEMU monitor of an adopted VM")
	}
	defer func() { _ = ln.Close() }()
	if err := shareWithVMM("", b.vmmIdentity(), 0, path); err != nil {
		return nil, fsaccess.Wrap(CodeVMNotRunning, err, "QEMU monitor of an adopted VM")
	}
	mon, err = acceptMonitor(ln, time.Now().Add(monitorReconnectWait))
	if err != nil {
		return nil, fsaccess.Wrap(CodeVMNotRunning, err, "QEMU monitor of an adopted VM (its chardev reconnects every second)")
	}
	b.mu.Lock()
	v.mon = mon
	b.mu.Unlock()
	return mon, nil
}

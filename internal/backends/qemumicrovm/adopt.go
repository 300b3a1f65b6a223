package qemumicrovm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/cgroups"
)

var _ backends.Adopter = (*Backend)(nil)

// rebindTimeout bounds the guest re-bind of an adoption (handshake + rebind + handshake).
const rebindTimeout = 15 * time.Second

// Adopt moves the running, handshaken VM of from (a warm-pool member) to to (its claimer),
// without a second boot (docs/pools.md). The VM must run in this process and its boot must
// embody to's plan (vCPUs, memory, image, command line, devices, roots); otherwise nothing
// changes and the caller allocates to afresh. In order:
//
//  1. the VM's cgroup vm-<from> becomes vm-<to> (cgroups.Rekey; reversible);
//  2. the guest is re-bound (guest protocol "rebind") to to's binding: to's environment
//     and VM plan digest, generation max(to.Generation, previous+1), a fresh nonce — the
//     guest then clears every process, session and stage of the member and refuses the
//     member's nonce for good;
//  3. the VM directory <vms>/<from> is renamed (no-replace) to <vms>/<to>: the sockets keep
//     their inodes (the VMM processes reach the directory through descriptors), and the
//     recovery record and binding file are rewritten for to.
//
// A crash after 2 leaves a record (under either name) whose binding the guest refuses, or
// whose id is not its directory's: recovery quarantines that VM, so it is never served as
// either environment. Nothing remains under from.ID.
func (b *Backend) Adopt(ctx context.Context, from, to backends.Spec) error {
	fail := func(format string, args ...any) error {
		return actuation.Refusef(actuation.CodeVMNotRunning, "adopt the VM of %s into %s: "+format, append([]any{from.Ref, to.Ref}, args...)...)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("adopt the VM of %s into %s: %w", from.Ref, to.Ref, err)
	}
	if err := b.checkID(from.ID); err != nil {
		return err
	}
	p, err := b.checkSpec(to)
	if err != nil {
		return err
	}
	if from.ID == to.ID {
		return fail("the same environment")
	}
	first, second := from.ID, to.ID
	if second < first {
		first, second = second, first
	}
	defer b.lock(first)()
	defer b.lock(second)()

	v := b.get(from.ID)
	switch {
	case v == nil:
		return fail("no VM of %s runs in this process", from.Ref)
	case !v.alive():
		return fail("the VM's QEMU or vsock device exited")
	case v.rec.State != StateRunning:
		return fail("the VM is %s", v.rec.State)
	case v.stoppedNow():
		return fail("the VM is paused")
	case b.get(to.ID) != nil:
		return fail("%s already has a VM", to.Ref)
	}
	newDir := b.dir(to.ID)
	if _, err := os.Lstat(newDir); err == nil {
		return fail("%s exists", newDir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("adopt the VM of %s into %s: %w", from.Ref, to.Ref, err)
	}
	rec := v.rec
	p.Accel = rec.Accel
	if why := embodies(rec, p); why != "" {
		return fail("the running boot is not %s's plan: %s", to.Ref, why)
	}
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	ref := to.Ref
	if ref == "" {
		ref = to.ID
	}
	gen := max(to.Generation, rec.Generation+1)
	next := protocol.Binding{EnvironmentRef: ref, SourceGeneration: gen, PlanDigest: p.digest(), ImageDigest: rec.Binding.ImageDigest,
		GuestCID: rec.Binding.GuestCID, BootNonce: nonce}

	// 1. The cgroup (reversible until the guest is re-bound).
	var rekeyed bool
	if b.cfg.Cgroups != nil {
		if _, err := b.cfg.Cgroups.Rekey(cgroups.KindVM, from.ID, to.ID); err != nil {
			return fmt.Errorf("adopt the VM of %s into %s: %w", from.Ref, to.Ref, err)
		}
		rekeyed = true
	}
	undoCgroup := func() {
		if rekeyed {
			_, _ = b.cfg.Cgroups.Rekey(cgroups.KindVM, to.ID, from.ID) // best effort: the member's teardown removes either name
		}
	}

	// 2. The guest.
	rctx, cancel := context.WithTimeout(ctx, rebindTimeout)
	defer cancel()
	if err := rebindGuest(rctx, v.endpoint(), rec.Binding, next); err != nil {
		if errors.Is(err, errNotRebound) {
			undoCgroup()
		}
		return fmt.Errorf("adopt the VM of %s into %s: %w", from.Ref, to.Ref, err)
	}

	// 3. The directory and the records. From here the VM is to's whatever fails: a
	// failure leaves it quarantined at the next recovery, never answering as from.
	b.mu.Lock()
	delete(b.vms, from.ID)
	b.mu.Unlock()
	oldDir := v.dir
	if err := unix.Renameat2(unix.AT_FDCWD, oldDir, unix.AT_FDCWD, newDir, unix.RENAME_NOREPLACE); err != nil {
		b.stopVM(v, "adoption by "+ref+" failed after the guest was re-bound: "+err.Error())
		return fmt.Errorf("adopt the VM of %s into %s: rename %s: %w", from.Ref, to.Ref, oldDir, err)
	}
	v.dir = newDir
	if rec.Disk != nil && b.cfg.Disks != nil {
		// The working disk follows the VM (same inode: QEMU keeps its descriptor).
		dst := b.cfg.Disks.Image(to.ID)
		if err := unix.Renameat2(unix.AT_FDCWD, rec.Disk.Path, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err != nil {
			b.stopVM(v, "adoption by "+ref+": working disk: "+err.Error())
			return fmt.Errorf("adopt the VM of %s into %s: rename the working disk %s: %w", from.Ref, to.Ref, rec.Disk.Path, err)
		}
		rec.Disk.Path = dst
	}
	rec.ID, rec.Ref, rec.Generation, rec.Binding, rec.SpecPlanDigest = to.ID, ref, gen, next, to.PlanDigest
	rec.Reason = "adopted from " + from.Ref
	for i := range rec.Sockets {
		rec.Sockets[i].Path = filepath.Join(newDir, filepath.Base(rec.Sockets[i].Path))
	}
	if err := writeRecord(newDir, rec); err != nil {
		b.stopVM(v, "adoption by "+ref+": "+err.Error())
		return fmt.Errorf("adopt the VM of %s into %s: %w", from.Ref, to.Ref, err)
	}
	// The fw_cfg binding file: QEMU read it at boot; it now says what the guest answers.
	_ = os.Remove(filepath.Join(newDir, bindingName))
	if bj, err := jsonBinding(next); err == nil {
		_ = writeFileAtomic(newDir, bindingName, bj, 0o400) // informational: nothing reads it after boot
	}
	b.mu.Lock()
	b.vms[to.ID] = v
	b.mu.Unlock()
	return nil
}

// embodies reports why the running boot rec is not the plan p ("" when it is).
func embodies(rec *Record, p *plan) string {
	switch {
	case rec.VCPUs != p.VCPUs || rec.MemoryMiB != p.MemoryMiB:
		return fmt.Sprintf("%d vCPUs and %d MiB, the plan asks %d and %d", rec.VCPUs, rec.MemoryMiB, p.VCPUs, p.MemoryMiB)
	case rec.Kernel.Digest != p.KernelDigest || rec.Initrd.Digest != p.InitrdDigest || rec.Variant != p.Variant:
		return "another boot image"
	case rec.Binding.ImageDigest != imageDigest(p.img):
		return "another image digest"
	case rec.CommandLine != guestLimits(commandLine(p.img.CommandLine, rec.Accel), rec.Disk, p.PIDs):
		return "another kernel command line"
	case !slices.Equal(rec.Devices, p.Devices):
		return "another device set"
	}
	return ""
}

// errNotRebound: the guest still answers to the previous binding.
var errNotRebound = errors.New("the guest was not re-bound")

// rebindGuest re-binds the guest from cur to next. A refused or failed rebind whose guest
// still handshakes with cur is errNotRebound; a lost answer is resolved by handshaking
// with next (re-bound) or cur (not re-bound).
func rebindGuest(ctx context.Context, ep guestclient.Endpoint, cur, next protocol.Binding) error {
	c, err := guestclient.Connect(ctx, ep, cur)
	if err != nil {
		return fmt.Errorf("%w: handshake with the member's binding: %w", errNotRebound, err)
	}
	_, rerr := c.Rebind(ctx, "", next) // closes c
	if rerr == nil {
		return nil
	}
	if nc, err := guestclient.Connect(ctx, ep, next); err == nil {
		_ = nc.Close()
		return nil // re-bound; the answer was lost
	}
	if oc, err := guestclient.Connect(ctx, ep, cur); err == nil {
		_ = oc.Close()
		return fmt.Errorf("%w: %w", errNotRebound, rerr)
	}
	return fmt.Errorf("the guest answers neither binding after a rebind: %w", rerr)
}

func jsonBinding(b protocol.Binding) ([]byte, error) { return json.Marshal(b) }

// othersOwn returns the process identities of the VMs this process runs other than v.
// A VM adopted from a pool member keeps the member's directory name in its processes'
// environment (scanOwned matches it), so tearing down the member's directory must never
// reach the processes of the VM that moved away from it.
func (b *Backend) othersOwn(v *vm) map[ProcIdentity]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[ProcIdentity]bool{}
	for _, o := range b.vms {
		if o == v {
			continue
		}
		for _, id := range []*ProcIdentity{o.rec.QEMU, o.rec.Device} {
			if id != nil {
				out[*id] = true
			}
		}
	}
	return out
}

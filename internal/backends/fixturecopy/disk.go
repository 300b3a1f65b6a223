package fixturecopy

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/loopdisk"
)

// Disks bounds every environment's copies with a filesystem of its own: the environment
// directory <stateDir>/fixtures/<ID> is the mount point of an ext4 disk from Pool (an
// image <stateDir>/disks/<ID>.img on an autoclear loop device, nosuid,nodev), sized
// resources.diskMiB or DefaultBytes. Everything of the environment — the copies, their
// records, every write a command or a FilePatch makes in them — lives on that disk, so a
// write past its size fails with ENOSPC there and nowhere else.
type Disks struct {
	Pool *loopdisk.Pool
	// DefaultBytes is the disk size of an environment that sets no diskMiB.
	DefaultBytes int64
	// Unavailable, when set, says why this node cannot make disks: every allocation is
	// then refused (resource-not-enforced) rather than copied unbounded.
	Unavailable string
}

// WithDisks turns per-environment disks on (see Disks) and returns b.
func (b *Backend) WithDisks(d Disks) *Backend {
	b.disks = &d
	return b
}

// DiskBound is the byte bound of spec's disk (0: this backend bounds nothing).
func (b *Backend) DiskBound(spec backends.Spec) int64 {
	if b.disks == nil || b.disks.Unavailable != "" {
		return 0
	}
	if spec.DiskMiB > 0 {
		return int64(spec.DiskMiB) << 20
	}
	return b.disks.DefaultBytes
}

// EnforcesDisk reports whether resources.diskMiB is enforced (the disk's size).
func (b *Backend) EnforcesDisk() bool { return b.disks != nil && b.disks.Unavailable == "" }

// Storage is the node reservation's use: bytes reserved by this backend's disks, the
// reservation's capacity and the number of disks (all 0 without disks).
func (b *Backend) Storage() (used, capacity int64, disks int, err error) {
	if !b.EnforcesDisk() {
		return 0, 0, 0, nil
	}
	used, disks, err = b.disks.Pool.Usage()
	return used, b.disks.Pool.Capacity(), disks, err
}

// ensureDisk makes (or mounts again) spec's disk at its environment directory; created
// says this call made it.
func (b *Backend) ensureDisk(ctx context.Context, fx *fsaccess.Root, spec backends.Spec) (bool, error) {
	if b.disks == nil {
		return false, nil
	}
	if b.disks.Unavailable != "" {
		return false, actuation.Refusef(actuation.CodeResourceNotEnforced,
			"this node cannot bound a managed copy's disk (%s); fixture-copy.v1 copies nothing unbounded", b.disks.Unavailable)
	}
	size := b.DiskBound(spec)
	if size < loopdisk.MinBytes || size > loopdisk.MaxBytes {
		return false, actuation.Refusef(actuation.CodeResourcesInvalid,
			"resources.diskMiB %d: a fixture-copy.v1 disk is %d..%d MiB", size>>20, loopdisk.MinBytes>>20, loopdisk.MaxBytes>>20)
	}
	if _, err := fx.MkdirAll(spec.ID, 0o700); err != nil {
		return false, fmt.Errorf("create %q: %w", filepath.Join(b.dir, spec.ID), err)
	}
	return b.disks.Pool.Ensure(ctx, spec.ID, size, filepath.Join(b.dir, spec.ID))
}

// releaseDisk unmounts and deletes id's disk (nothing without disks).
func (b *Backend) releaseDisk(id string) error {
	if b.disks == nil || b.disks.Pool == nil {
		return nil
	}
	return b.disks.Pool.Release(id, filepath.Join(b.dir, id))
}

// moveDirOrDisk moves environment directory from to to: with disks the disk mounted there
// moves with it (loopdisk.Pool.Move: a mount point cannot be renamed), else one rename.
func (b *Backend) moveDirOrDisk(fx *fsaccess.Root, from, to string) error {
	if b.disks == nil || b.disks.Pool == nil {
		return fx.RenameNoReplace(from, to)
	}
	return b.disks.Pool.Move(from, filepath.Join(b.dir, from), to, filepath.Join(b.dir, to))
}

// copyError classifies a failed copy: a source that does not fit the environment's disk
// is fixture-too-large.
func (b *Backend) copyError(source string, err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return actuation.Wrapf(actuation.CodeFixtureTooLarge, err, "copy %q: the source does not fit the environment's disk (resources.diskMiB)", source)
	}
	return fmt.Errorf("copy %q: %w", source, err)
}

// recoverDisks sweeps the disks: those of unknown environments are unmounted and deleted
// (with their loop devices), those of known ones are mounted again where they are not.
func (b *Backend) recoverDisks(known map[string]backends.Spec) []backends.RecoveryAction {
	if b.disks == nil || b.disks.Pool == nil {
		return nil
	}
	var out []backends.RecoveryAction
	for _, a := range b.disks.Pool.Sweep(b.dir, func(id string) bool { _, ok := known[id]; return ok }) {
		outcome := "terminated"
		if !a.Removed {
			outcome = "failed-retryable"
		}
		out = append(out, backends.RecoveryAction{Resource: a.Resource, Outcome: outcome, Message: a.Message})
	}
	if b.disks.Unavailable != "" {
		return out
	}
	for id := range known {
		img := b.disks.Pool.Image(id)
		dir := filepath.Join(b.dir, id)
		if ok, err := b.disks.Pool.Mounted(id, dir); err != nil || ok {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(img, &st) != nil {
			continue
		}
		unlock := b.lock(id)
		err := loopdisk.Mount(img, dir)
		unlock()
		if err != nil {
			out = append(out, backends.RecoveryAction{Resource: img, Outcome: "failed-retryable", Message: fmt.Sprintf("mount the environment's disk again: %v", err)})
			continue
		}
		out = append(out, backends.RecoveryAction{Resource: img, Outcome: "recovered", Message: "environment's disk mounted again"})
	}
	return out
}

// ReleaseDisks unmounts and deletes every disk of the fixture-copy backend of an agent
// whose state directory is stateDir (a test harness whose agent is gone for good; the
// agent itself keeps its disks across restarts).
func ReleaseDisks(stateDir string) []loopdisk.Action {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	p := loopdisk.NewPool(filepath.Join(abs, DisksDir), 0)
	return p.Sweep(filepath.Join(abs, FixturesDir), func(string) bool { return false })
}

// DisksDir is where the disk images live under the state directory.
const DisksDir = "disks"

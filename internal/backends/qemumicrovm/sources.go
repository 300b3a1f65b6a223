package qemumicrovm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/loopdisk"
)

// Workspace sources into a VM (issue 28 item 1). A full-system variant's roots are
// directories beneath the guest agent's root (/workspace in the reference image) on the
// environment's working disk. A sourced root is materialized there on the host, before the
// disk's first boot: the fresh clone of the digest-verified base — a filesystem no guest has
// written — is loop-mounted (nosuid,nodev) at a private mount point, the source is
// materialized into /workspace/<root> by the same code and under the same bounds and
// refusals as a fixture-copy.v1 managed copy (internal/platform/sources), the filesystem is
// synced and unmounted (never lazily), and only then is the disk booted. The host never
// mounts a disk a guest has run on. Any failure deletes the disk: a half-filled workspace is
// never booted. An interrupted fill (an agent crash while the disk was mounted) leaves its
// mount point, which the next boot finds: it unmounts it and deletes the disk, which is then
// cloned and filled again (clearInterruptedFill). Why not the guest agent's file
// operations after boot: they would carry every file, mode and link of a checkout through
// the vsock protocol one call at a time (slow under TCG, and the protocol has no symlink
// or mode-preserving create), and the guest would see a workspace filling under it.

// GuestRootInDisk is the guest agent's root on a full-system working disk (the image's
// workbench-guest.service runs it with --root /workspace).
const GuestRootInDisk = "workspace"

// fillDir is where working disks are mounted while their sources are materialized
// (<StateDir>/vm-fill/<id>, 0700).
const fillDir = "vm-fill"

// sourcedRoots returns spec's roots that come from a workspace source.
func sourcedRoots(spec backends.Spec) []backends.Root {
	var out []backends.Root
	for _, r := range spec.Roots {
		if r.Materialize != nil || r.SourceID != "" {
			out = append(out, r)
		}
	}
	return out
}

// sourceIDs is what a working disk records of the sources it was filled from.
func sourceIDs(spec backends.Spec) []string {
	var ids []string
	for _, r := range sourcedRoots(spec) {
		ids = append(ids, r.Name+"="+r.SourceID)
	}
	return ids
}

// checkSources refuses sourced roots the plan cannot materialize: a variant without a
// working disk (the minimal image has nowhere to put them), or a disk the record binds
// that was filled from other sources than the spec names now.
func checkSources(spec backends.Spec, p *plan, prev *DiskRef) error {
	ids := sourceIDs(spec)
	if len(ids) == 0 {
		return nil
	}
	if p.img == nil || p.img.DiskPath == "" {
		return actuation.Refusef(actuation.CodeSourceBackendUnsupported, "environment %s: variant %q has no working disk; sourced roots need a full-system variant", spec.Ref, p.Variant)
	}
	for _, r := range sourcedRoots(spec) {
		if r.Materialize == nil {
			return actuation.Refusef(actuation.CodeSourceInvalid, "environment %s: root %q names a source the node did not bind", spec.Ref, r.Name)
		}
	}
	if prev != nil && !slices.Equal(prev.Sources, ids) {
		return actuation.Refusef(actuation.CodeSourceInvalid, "environment %s: its working disk was filled from %v, the spec now names %v; sources of a VM are fixed at its first boot (recreate the environment)",
			spec.Ref, prev.Sources, ids)
	}
	return nil
}

func (b *Backend) fillPoint(id string) string {
	return filepath.Join(b.cfg.StateDir, fillDir, id)
}

// clearInterruptedFill removes what a fill interrupted by a crash left: its mount (not
// lazily) and mount point, and the half-filled disk, which no record binds. It reports
// whether there was one.
func (b *Backend) clearInterruptedFill(id string) (bool, error) {
	mnt := b.fillPoint(id)
	if _, err := os.Lstat(mnt); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if mounts, err := loopdisk.MountsUnder(mnt); err == nil {
		for i := len(mounts) - 1; i >= 0; i-- {
			if err := loopdisk.UnmountNow(mounts[i].Point); err != nil {
				return true, err
			}
		}
	}
	if err := os.Remove(mnt); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, fmt.Errorf("remove interrupted fill's mount point: %w", err)
	}
	if b.cfg.Disks != nil {
		if err := b.cfg.Disks.Delete(id); err != nil && !errors.Is(err, os.ErrNotExist) {
			return true, fmt.Errorf("delete the half-filled working disk: %w", err)
		}
	}
	return true, nil
}

// fillDisk materializes spec's sourced roots into the freshly cloned working disk at
// disk.Path (see the package comment above) and records their identities in disk. On
// error the caller deletes the disk.
func (b *Backend) fillDisk(ctx context.Context, spec backends.Spec, disk *DiskRef) (err error) {
	roots := sourcedRoots(spec)
	if len(roots) == 0 {
		return nil
	}
	parent := filepath.Join(b.cfg.StateDir, fillDir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	mnt := b.fillPoint(spec.ID)
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return fmt.Errorf("fill mount point: %w", err)
	}
	if err := loopdisk.MountImage(disk.Path, mnt); err != nil {
		_ = os.Remove(mnt)
		return actuation.Wrapf(actuation.CodeSourceBackendUnsupported, err, "mount the working disk to fill its sources")
	}
	mounted := true
	defer func() {
		if mounted {
			if uerr := loopdisk.UnmountNow(mnt); uerr != nil {
				err = errors.Join(err, uerr)
				return // the mount point stays: the next boot clears it (clearInterruptedFill)
			}
		}
		if rerr := os.Remove(mnt); rerr != nil && err == nil {
			err = rerr
		}
	}()
	disk.Sources = sourceIDs(spec)
	if err := fillRoots(ctx, mnt, roots); err != nil {
		return err
	}
	if err := loopdisk.UnmountNow(mnt); err != nil {
		return err
	}
	mounted = false
	return nil
}

// fillRoots materializes roots into <mnt>/workspace/<root> and syncs the filesystem.
func fillRoots(ctx context.Context, mnt string, roots []backends.Root) error {
	root, err := fsaccess.OpenRoot(mnt)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	r := root.NoSymlinks()
	if e, err := r.Lstat(GuestRootInDisk); err != nil || e.Type != fsaccess.TypeDir {
		return actuation.Refusef(actuation.CodeImageInvalid, "the working disk has no /%s directory for the guest's roots", GuestRootInDisk)
	}
	for _, rt := range roots {
		rel := GuestRootInDisk + "/" + rt.Name
		if err := r.Mkdir(rel, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if ents, err := os.ReadDir(filepath.Join(mnt, rel)); err != nil || len(ents) != 0 {
			return actuation.Refusef(actuation.CodeImageInvalid, "the base image's /%s is not empty (%d entries, %v)", rel, len(ents), err)
		}
		sub, err := r.Sub(rel)
		if err != nil {
			return err
		}
		_, _, _, err = rt.Materialize(ctx, sub, filepath.Join(mnt, rel))
		_ = sub.Close()
		if err != nil {
			return err
		}
	}
	return root.SyncFS()
}

package qemumicrovm

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// DisksDir is where working disks live under the node agent's state directory
// (<id>.img, one per environment).
const DisksDir = "vm-disks"

// MaxDiskBaseBytes bounds a variant's raw root disk (image-invalid above it).
const MaxDiskBaseBytes = 64 << 30

// diskFD and diskROFD are the descriptors QEMU finds the working disk at (ExtraFiles[3]
// read-write, ExtraFiles[4] read-only): one fd set (-add-fd) holding both access modes,
// since QEMU dups from the set with the mode it asks for; it never opens a host path.
const (
	diskFD   = 6
	diskROFD = 7
)

// DiskRef binds an environment's working disk in the recovery record: the image in the
// working-disk pool by path and identity (device, inode), its fixed virtual size, and the
// digest of the pinned base it was cloned from. A boot or an adoption uses the image only
// while all of them still hold.
type DiskRef struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	// Birth is the file's creation time (statx btime, ns; 0 where the filesystem has none):
	// a file made later at the same path cannot pass for it even if it got the inode
	// number back.
	Birth      int64  `json:"birth,omitempty"`
	Size       int64  `json:"size"`
	BaseDigest string `json:"baseDigest"`
	Method     string `json:"method,omitempty"` // reflink or sparse (at creation)
	// Sources are the workspace sources the disk was filled from before its first boot
	// (root=sourceID; sources.go): a later boot of a spec naming others is refused.
	Sources []string `json:"sources,omitempty"`
}

// openDiskBase opens the variant's raw base beneath the image directory and verifies its
// digest (cached per file identity: a base is hashed once per change).
func (b *Backend) openDiskBase(img *backends.BootImage) (*os.File, error) {
	root, err := fsaccess.OpenRoot(b.cfg.ImageDir)
	if err != nil {
		return nil, actuation.Wrapf(actuation.CodeImageInvalid, err, "image directory %q", b.cfg.ImageDir)
	}
	defer func() { _ = root.Close() }()
	f, e, err := root.OpenRead(img.DiskPath)
	if err != nil {
		return nil, actuation.Wrapf(actuation.CodeImageInvalid, err, "disk %q beneath %s", img.DiskPath, b.cfg.ImageDir)
	}
	if e.Size > MaxDiskBaseBytes {
		_ = f.Close()
		return nil, actuation.Refusef(actuation.CodeImageInvalid, "disk %q is %d bytes, at most %d", img.DiskPath, e.Size, int64(MaxDiskBaseBytes))
	}
	if err := b.verifyN(f, img.DiskDigest, MaxDiskBaseBytes); err != nil {
		_ = f.Close()
		return nil, actuation.Wrapf(actuation.CodeDigestMismatch, err, "disk %q", img.DiskPath)
	}
	return f, nil
}

// workingDisk returns the environment's working disk open for reading and writing: the
// existing image when the previous record bound exactly it (same identity, same base),
// else a new clone of base (reflink or sparse) of size bytes under the node's storage
// reservation (storage-exhausted past it). An image the record does not bind, or one
// whose identity changed, is refused (disk-identity-mismatch is the record's word for a
// swapped file; it is never booted).
func (b *Backend) workingDisk(id string, base *os.File, baseDigest string, size int64, prev *DiskRef) (*os.File, *DiskRef, error) {
	if b.cfg.Disks == nil {
		return nil, nil, actuation.Refusef(actuation.CodeStorageExhausted, "this node has no working-disk pool for full-system variants")
	}
	path := b.cfg.Disks.Image(id)
	_, statErr := os.Lstat(path)
	switch {
	case statErr == nil && prev == nil:
		return nil, nil, actuation.Refusef(actuation.CodeBootFailed, "a working disk %s exists that no record of this environment binds; not booted", path)
	case statErr != nil && !errors.Is(statErr, os.ErrNotExist):
		return nil, nil, fmt.Errorf("working disk: %w", statErr)
	}
	method := ""
	if statErr != nil {
		created, m, err := b.cfg.Disks.Clone(id, base, size)
		if err != nil {
			return nil, nil, err
		}
		if !created {
			return nil, nil, actuation.Refusef(actuation.CodeBootFailed, "working disk %s appeared during the clone", path)
		}
		method, prev = m, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open working disk: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = f.Close()
		return nil, nil, fmt.Errorf("working disk %s is not a regular file (%v)", path, err)
	}
	ref := &DiskRef{Path: path, Dev: uint64(st.Dev), Ino: st.Ino, Birth: birthOf(int(f.Fd())), Size: st.Size, BaseDigest: baseDigest, Method: method}
	if prev != nil {
		if prev.Path != ref.Path || prev.Dev != ref.Dev || prev.Ino != ref.Ino || prev.Birth != ref.Birth || prev.BaseDigest != baseDigest {
			_ = f.Close()
			return nil, nil, actuation.Refusef(actuation.CodeBootFailed, "working disk %s is not the one the record binds (dev %d inode %d of base %s; now dev %d inode %d of base %s); not booted",
				path, prev.Dev, prev.Ino, protocol.Truncate(prev.BaseDigest), ref.Dev, ref.Ino, protocol.Truncate(baseDigest))
		}
		ref.Method, ref.Sources = prev.Method, prev.Sources
	}
	return f, ref, nil
}

// guestLimits appends the guest supervisor's per-command pids limit to a full-system
// boot's command line (workbench.pids=N; the guest agent reads it from /proc/cmdline). The
// minimal variant has no cgroups: its command line stays as it is.
func guestLimits(cmdline string, disk *DiskRef, pids int32) string {
	if disk == nil || pids <= 0 {
		return cmdline
	}
	return cmdline + " workbench.pids=" + strconv.Itoa(int(pids))
}

// readOnlyTwin opens f's file again read-only and checks it is the same inode.
func readOnlyTwin(f *os.File) (*os.File, error) {
	ro, err := os.OpenFile(f.Name(), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Fstat(int(ro.Fd()), &b) != nil || a.Dev != b.Dev || a.Ino != b.Ino {
		_ = ro.Close()
		return nil, fmt.Errorf("working disk %s changed while it was opened", f.Name())
	}
	return ro, nil
}

// checkDisk reports whether the record's working disk is still the bound file.
func checkDisk(ref *DiskRef) error {
	if ref == nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(ref.Path, &st); err != nil {
		return fmt.Errorf("working disk %s: %w", ref.Path, err)
	}
	if uint64(st.Dev) != ref.Dev || st.Ino != ref.Ino {
		return fmt.Errorf("working disk %s is dev %d inode %d, the record binds dev %d inode %d", ref.Path, st.Dev, st.Ino, ref.Dev, ref.Ino)
	}
	f, err := os.OpenFile(ref.Path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("working disk %s: %w", ref.Path, err)
	}
	defer func() { _ = f.Close() }()
	if b := birthOf(int(f.Fd())); b != ref.Birth {
		return fmt.Errorf("working disk %s was created at %d, the record binds one created at %d", ref.Path, b, ref.Birth)
	}
	return nil
}

// birthOf is fd's creation time in ns (0 where statx has no btime).
func birthOf(fd int) int64 {
	var stx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BTIME, &stx) != nil || stx.Mask&unix.STATX_BTIME == 0 {
		return 0
	}
	return stx.Btime.Sec*1_000_000_000 + int64(stx.Btime.Nsec)
}

// deleteDisk removes id's working disk unless keep; what it could not remove is residue.
func (b *Backend) deleteDisk(id string, keep bool) []string {
	if b.cfg.Disks == nil || keep {
		return nil
	}
	if err := b.cfg.Disks.Delete(id); err != nil {
		return []string{b.cfg.Disks.Image(id) + ": " + err.Error()}
	}
	return nil
}

//go:build darwin

package fsaccess

import (
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// The darwin resolution mechanism. macOS has no openat2: every resolution is one
// openat(2) relative to the directory fd with O_NOFOLLOW_ANY (macOS 11+), which makes
// the kernel refuse (ELOOP, code symlink-escape) a symbolic link in ANY component, the
// final one included. That is stricter than Linux, where a link that stays beneath the
// root is followed: on a Mac node no path through a link resolves at all. A path that
// could leave the root lexically (absolute, or a ".." component) is refused before the
// kernel sees it; without links, no other path can leave the directory fd's subtree.
// There is no O_PATH: descriptors are opened read-only (the node agent runs as root, and
// every such descriptor here is a directory).

// resolveFlags carries nothing on darwin: O_NOFOLLOW_ANY is always applied.
const resolveFlags uint64 = 0

// resolveNoSymlinks is what Linux's NoSymlinks view adds; darwin refuses every link anyway.
const resolveNoSymlinks uint64 = 0

const oPath = unix.O_RDONLY

// oNoatime: darwin has no O_NOATIME (reads may update atime, as they do without it on Linux).
const oNoatime = 0

// renameNoReplace selects renameatx_np(RENAME_EXCL).
const renameNoReplace uint = 1

func openResolve(dirfd int, rel string, flags int, mode uint32, display string, _ uint64) (int, error) {
	if err := checkBeneath(rel, display); err != nil {
		return -1, err
	}
	for i := 0; ; i++ {
		fd, err := unix.Openat(dirfd, rel, flags|unix.O_CLOEXEC|unix.O_NOFOLLOW_ANY, mode)
		if err == nil {
			return fd, nil
		}
		if err == unix.EINTR && i < maxResolveRetries {
			continue
		}
		return -1, mapOpenErr(err, display)
	}
}

// checkBeneath refuses a path that names something outside the directory it is
// resolved from without any link: absolute, or with a ".." component (RESOLVE_BENEATH's
// lexical half; CheckRel refuses these earlier, this is the resolver's own guard).
func checkBeneath(rel, display string) error {
	if strings.HasPrefix(rel, "/") {
		return actuation.Refusef(actuation.CodeSymlinkEscape, "%q resolves outside the root", display)
	}
	for _, c := range strings.Split(rel, "/") {
		if c == ".." {
			return actuation.Refusef(actuation.CodeSymlinkEscape, "%q resolves outside the root", display)
		}
	}
	return nil
}

// pinOpen opens the absolute directory dir from "/" refusing every symlink on the way
// (O_NOFOLLOW_ANY). On macOS /var, /tmp and /etc are links into /private: name the
// /private path.
func pinOpen(dir string) (int, error) {
	for _, c := range strings.Split(dir, "/") {
		if c == ".." {
			return -1, actuation.Refusef(actuation.CodeSymlinkEscape, "root %q has a \"..\" component", dir)
		}
	}
	for i := 0; ; i++ {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW_ANY, 0)
		if err == unix.EINTR && i < maxResolveRetries {
			continue
		}
		if err != nil {
			return -1, mapOpenErr(err, dir)
		}
		return fd, nil
	}
}

func statToEntry(p string, st *unix.Stat_t) Entry {
	e := Entry{
		Path:    p,
		Size:    st.Size,
		Mode:    unixMode(uint32(st.Mode)),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
		ino:     st.Ino,
		dev:     uint64(st.Dev),
		ctime:   st.Ctim.Sec*1e9 + st.Ctim.Nsec,
	}
	e.Type = entryType(uint32(st.Mode))
	return e
}

func statDev(st *unix.Stat_t) uint64 { return uint64(st.Dev) }

func fileKeyOf(st *unix.Stat_t) FileKey {
	return FileKey{Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size, MtimeNs: st.Mtim.Sec*1e9 + st.Mtim.Nsec, CtimeNs: st.Ctim.Sec*1e9 + st.Ctim.Nsec}
}

// renameat2 renames with renameatx_np; renameNoReplace becomes RENAME_EXCL (EEXIST when
// the target exists, atomically).
func renameat2(olddirfd int, oldpath string, newdirfd int, newpath string, flags uint) error {
	switch flags {
	case 0:
		return unix.Renameat(olddirfd, oldpath, newdirfd, newpath)
	case renameNoReplace:
		return unix.RenameatxNp(olddirfd, oldpath, newdirfd, newpath, unix.RENAME_EXCL)
	}
	return fmt.Errorf("fsaccess: rename flags %#x not supported on darwin", flags)
}

// syncfs: macOS has no syncfs(2). sync(2) schedules every dirty buffer of every
// filesystem, and F_FULLFSYNC on fd then makes the device holding it flush its write
// cache to permanent storage.
func syncfs(fd int) error {
	if err := unix.Sync(); err != nil {
		return err
	}
	_, err := unix.FcntlInt(uintptr(fd), unix.F_FULLFSYNC, 0)
	return err
}

// MountIdentity returns the mount identity of the root's directory: st_dev only (macOS
// has no mount id; the same answer Linux gives without statx's mount id).
func (r *Root) MountIdentity() (MountIdentity, error) {
	i, err := r.Identity()
	if err != nil {
		return MountIdentity{}, err
	}
	return MountIdentity{Dev: i.Dev}, nil
}

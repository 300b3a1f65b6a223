//go:build linux

package fsaccess

import (
	"time"

	"golang.org/x/sys/unix"
)

// The Linux resolution mechanism: openat2(2) with RESOLVE_* flags, O_PATH descriptors.

// resolveFlags is applied to every path resolution: the result must stay beneath
// the directory fd, and /proc-style magic links are never followed.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// resolveNoSymlinks is the extra resolve flag of a NoSymlinks view.
const resolveNoSymlinks = unix.RESOLVE_NO_SYMLINKS

// oPath opens a descriptor that only names a file (no read or write access).
const oPath = unix.O_PATH

// oNoatime asks a read not to update the access time (EPERM when not the owner).
const oNoatime = unix.O_NOATIME

// renameNoReplace is rename's refuse-if-the-target-exists flag.
const renameNoReplace = unix.RENAME_NOREPLACE

// openat2 is the only path-resolution syscall in this package; tests replace it
// to simulate a kernel without openat2.
var openat2 = unix.Openat2

func openResolve(dirfd int, rel string, flags int, mode uint32, display string, resolve uint64) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: resolve,
	}
	for i := 0; ; i++ {
		fd, err := openat2(dirfd, rel, &how)
		if err == nil {
			return fd, nil
		}
		if (err == unix.EINTR || err == unix.EAGAIN) && i < maxResolveRetries {
			continue
		}
		return -1, mapOpenErr(err, display)
	}
}

// pinOpen opens the absolute directory dir from "/" refusing every symlink on the way.
func pinOpen(dir string) (int, error) {
	how := unix.OpenHow{Flags: uint64(unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	var fd int
	var err error
	for i := 0; ; i++ {
		fd, err = openat2(unix.AT_FDCWD, dir, &how)
		if (err == unix.EINTR || err == unix.EAGAIN) && i < maxResolveRetries {
			continue
		}
		break
	}
	if err != nil {
		return -1, mapOpenErr(err, dir)
	}
	return fd, nil
}

func statToEntry(p string, st *unix.Stat_t) Entry {
	e := Entry{
		Path:    p,
		Size:    st.Size,
		Mode:    unixMode(st.Mode),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
		ino:     st.Ino,
		dev:     st.Dev,
		ctime:   st.Ctim.Sec*1e9 + st.Ctim.Nsec,
	}
	e.Type = entryType(st.Mode)
	return e
}

func statDev(st *unix.Stat_t) uint64 { return st.Dev }

func fileKeyOf(st *unix.Stat_t) FileKey {
	return FileKey{Dev: st.Dev, Ino: st.Ino, Size: st.Size, MtimeNs: st.Mtim.Sec*1e9 + st.Mtim.Nsec, CtimeNs: st.Ctim.Sec*1e9 + st.Ctim.Nsec}
}

func renameat2(olddirfd int, oldpath string, newdirfd int, newpath string, flags uint) error {
	return unix.Renameat2(olddirfd, oldpath, newdirfd, newpath, flags)
}

// syncfs flushes the whole filesystem holding fd (syncfs(2)).
func syncfs(fd int) error { return unix.Syncfs(fd) }

// MountIdentity returns the mount identity of the root's directory.
func (r *Root) MountIdentity() (MountIdentity, error) {
	var stx unix.Statx_t
	if err := unix.Statx(r.fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO|unix.STATX_MNT_ID_UNIQUE, &stx); err == nil {
		id := MountIdentity{Dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor)}
		switch {
		case stx.Mask&unix.STATX_MNT_ID_UNIQUE != 0:
			id.MountID, id.UniqueID = stx.Mnt_id, true
		case stx.Mask&unix.STATX_MNT_ID != 0:
			id.MountID = stx.Mnt_id
		}
		return id, nil
	}
	i, err := r.Identity()
	if err != nil {
		return MountIdentity{}, err
	}
	return MountIdentity{Dev: i.Dev}, nil
}

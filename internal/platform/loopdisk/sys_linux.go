//go:build linux

package loopdisk

import (
	"os"

	"golang.org/x/sys/unix"
)

func availBytes(st *unix.Statfs_t) int64 { return int64(st.Bavail) * st.Bsize }

func bindMount(from, to string) error { return unix.Mount(from, to, "", unix.MS_BIND, "") }

func remountBindSafe(dir string) error {
	return unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|mountFlags, "")
}

func fileClone(dst, src *os.File) error { return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())) }

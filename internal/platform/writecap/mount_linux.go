//go:build linux

package writecap

import "golang.org/x/sys/unix"

func mountTmpfs(dir, opts string) error {
	return unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts)
}

func unmountDetach(dir string) error { return unix.Unmount(dir, unix.MNT_DETACH) }

package loopdisk

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// MountImage attaches a whole-filesystem image (a VM's freshly cloned working disk, never
// one a guest has run on) to a free loop device (autoclear) and mounts it at dir
// nosuid,nodev, leaving the filesystem as it is (unlike Mount, which shapes a fixture
// disk's root). The caller unmounts with Unmount.
func MountImage(image, dir string) error {
	return attachMount(image, dir)
}

// UnmountNow unmounts dir and fails (never detaches lazily) while something still holds
// it: a disk handed to a VM afterwards must not be mounted on the host any more.
func UnmountNow(dir string) error {
	if err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW); err != nil {
		return fmt.Errorf("loopdisk: unmount %s: %w", dir, err)
	}
	return nil
}

package loopdisk

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// MountImage attaches a whole-filesystem image (a VM's freshly cloned working disk, never
// one a guest has run on) to a free loop device (autoclear) and mounts it at dir
// nosuid,nodev, leaving the filesystem as it is (unlike Mount, which shapes a fixture
// disk's root). The caller unmounts with Unmount.
func MountImage(image, dir string) error {
	img, err := os.OpenFile(image, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopdisk: open %s: %w", image, err)
	}
	defer func() { _ = img.Close() }()
	loop, dev, err := attach(img, image)
	if err != nil {
		return err
	}
	defer func() { _ = loop.Close() }()
	if err := unix.Mount(dev, dir, FSType, mountFlags, ""); err != nil {
		return fmt.Errorf("loopdisk: mount %s (%s) at %s: %w", dev, image, dir, err)
	}
	return nil
}

// UnmountNow unmounts dir and fails (never detaches lazily) while something still holds
// it: a disk handed to a VM afterwards must not be mounted on the host any more.
func UnmountNow(dir string) error {
	if err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW); err != nil {
		return fmt.Errorf("loopdisk: unmount %s: %w", dir, err)
	}
	return nil
}

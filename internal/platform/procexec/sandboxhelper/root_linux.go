//go:build linux

package sandboxhelper

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Mount kinds of the sandbox root.
const (
	MountBind    = "bind"    // read-only recursive bind of Source (system directories)
	MountDevBind = "devbind" // bind of a device file (Source), nosuid, noexec
	MountFD      = "fd"      // a detached (idmapped) mount from the parent: FD indexes the received descriptors
	MountTmpfs   = "tmpfs"   // a fresh tmpfs (Data: options)
	MountProc    = "proc"    // the PID namespace's own proc
	MountSymlink = "symlink" // a symlink to Link
)

// MountSpec is one entry of the sandbox root. Target is the path inside.
type MountSpec struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	Source string `json:"source,omitempty"`
	FD     int    `json:"fd,omitempty"`
	File   bool   `json:"file,omitempty"`
	Link   string `json:"link,omitempty"`
	Data   string `json:"data,omitempty"`
}

// stagingDir is where the new root is assembled in the helper's private mount
// namespace; nothing of the host is read through it once it is covered (every
// host source is cloned into a detached mount before).
const stagingDir = "/tmp"

// buildRoot assembles the sandbox root and pivots into it. Host sources are
// cloned first (open_tree), then a tmpfs covers stagingDir and every entry is
// attached below it; the old root is detached and the new root made read-only.
func buildRoot(cfg *Config, fds []int) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// Phase 1: clone host sources while the host tree is still visible.
	clones := make([]int, len(cfg.Mounts))
	for i := range clones {
		clones[i] = -1
	}
	defer func() {
		for _, fd := range clones {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for i, m := range cfg.Mounts {
		var flags uint = unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC
		var attr unix.MountAttr
		switch m.Kind {
		case MountBind:
			flags |= unix.AT_RECURSIVE
			attr.Attr_set = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
		case MountDevBind:
			attr.Attr_set = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC
		default:
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.Source, flags)
		if err != nil {
			return fmt.Errorf("open_tree %s: %w", m.Source, err)
		}
		clones[i] = fd
		setFlags := uint(unix.AT_EMPTY_PATH)
		if flags&unix.AT_RECURSIVE != 0 {
			setFlags |= unix.AT_RECURSIVE
		}
		if err := unix.MountSetattr(fd, "", setFlags, &attr); err != nil {
			return fmt.Errorf("mount_setattr %s: %w", m.Source, err)
		}
	}

	// Phase 2: the new root.
	if err := unix.Mount("tmpfs", stagingDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	root := stagingDir
	// Directories created only to reach a root (e.g. the agent's state dir
	// above a managed copy) become traverse-only: the program can reach its
	// roots by path but cannot list or open what leads to them.
	var skeleton []string
	targets := map[string]bool{}
	for _, m := range cfg.Mounts {
		targets[filepath.Join(root, m.Target)] = true
	}
	for i, m := range cfg.Mounts {
		target := filepath.Join(root, m.Target)
		if m.Kind == MountSymlink {
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(m.Link, target); err != nil {
				return fmt.Errorf("symlink %s: %w", m.Target, err)
			}
			continue
		}
		if m.Kind == MountFD {
			for d := filepath.Dir(target); len(d) > len(root) && !targets[d]; d = filepath.Dir(d) {
				if _, err := os.Lstat(d); err != nil {
					skeleton = append(skeleton, d)
				}
			}
		}
		if err := mountPoint(target, m.File); err != nil {
			return fmt.Errorf("mount point %s: %w", m.Target, err)
		}
		switch m.Kind {
		case MountBind, MountDevBind:
			if err := unix.MoveMount(clones[i], "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return fmt.Errorf("move_mount %s: %w", m.Target, err)
			}
		case MountFD:
			if m.FD < 0 || m.FD >= len(fds) {
				return fmt.Errorf("mount %s: descriptor index %d of %d", m.Target, m.FD, len(fds))
			}
			if err := unix.MoveMount(fds[m.FD], "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return fmt.Errorf("move_mount %s: %w", m.Target, err)
			}
		case MountTmpfs:
			if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, m.Data); err != nil {
				return fmt.Errorf("mount tmpfs %s: %w", m.Target, err)
			}
		case MountProc:
			if err := unix.Mount("proc", target, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
				return fmt.Errorf("mount proc: %w", err)
			}
		default:
			return fmt.Errorf("unknown mount kind %q", m.Kind)
		}
	}

	for _, d := range skeleton {
		if err := os.Chmod(d, 0o111); err != nil {
			return fmt.Errorf("chmod %s: %w", d, err)
		}
	}

	// Phase 3: pivot, detach the host tree, freeze the root.
	return PivotReadOnly(root)
}

// PivotReadOnly makes root (a mount point in this thread's private mount namespace) the
// root: pivot_root onto it, detach the host tree, and make the new root read-only. The
// process sandbox and the VMM sandbox both end their root build with it.
func PivotReadOnly(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("chdir %s: %w", root, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	return nil
}

func mountPoint(target string, file bool) error {
	if !file {
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

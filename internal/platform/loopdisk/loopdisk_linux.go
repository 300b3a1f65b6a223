//go:build linux

// Package loopdisk gives an environment a filesystem of its own with a byte bound the
// kernel enforces: a sparse image file under the node agent's state directory, formatted
// ext4 (mkfs.ext4 from e2fsprogs, no reserved blocks), attached to a loop device with
// LO_FLAGS_AUTOCLEAR and mounted nosuid,nodev. A write past the bound fails with ENOSPC
// inside that filesystem only; the state directory's filesystem keeps the rest.
//
// A Pool owns one directory of images (<stateDir>/disks/<id>.img) and a node-wide
// reservation: the sum of the images' sizes (their virtual sizes, so sparse images can
// never together outgrow it) may not exceed the pool's capacity; a disk that would
// overcommit is refused with storage-exhausted. The images on disk are the ledger, so the
// accounting survives an agent restart without a separate record.
//
// Loop devices are attached with LOOP_CONFIGURE and LO_FLAGS_AUTOCLEAR: the device
// detaches itself when its last user (the mount) goes, and a crash between the attach
// and the mount (the agent's descriptor closes with the process) leaves no device either.
// No Kubernetes imports.
package loopdisk

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// Bounds.
const (
	// MinBytes is the smallest disk (an ext4 with a journal needs a few MiB of metadata).
	MinBytes = 16 << 20
	// MaxBytes bounds one disk (1 TiB).
	MaxBytes = 1 << 40
	// mkfsTimeout bounds one mkfs.ext4 run.
	mkfsTimeout = 60 * time.Second
	// maxMkfsOutput bounds what is kept of mkfs's output for an error message.
	maxMkfsOutput = 4 << 10
	// configureAttempts bounds the LOOP_CTL_GET_FREE / LOOP_CONFIGURE race with other
	// users of loop devices.
	configureAttempts = 16
	// maxMountinfoBytes bounds /proc/self/mountinfo as read here.
	maxMountinfoBytes = 16 << 20
)

// loopMajor is the block major of loop devices.
const loopMajor = 7

// FSType is the filesystem of every disk.
const FSType = "ext4"

// mountFlags: no setuid/setgid or file capability takes effect, no device node opens.
const mountFlags = unix.MS_NOSUID | unix.MS_NODEV

// Check reports whether this node can make bounded disks (nil) or why not: it needs
// /dev/loop-control, mkfs.ext4 and the privilege to attach and mount (root).
func Check() error {
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("no loop devices: %w", err)
	}
	if _, err := mkfsPath(); err != nil {
		return err
	}
	fd, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/loop-control: %w", err)
	}
	_ = unix.Close(fd)
	return nil
}

func mkfsPath() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("mkfs.ext4 not found (install e2fsprogs)")
}

// Format creates image (which must not exist) as a sparse file of size bytes and
// formats it ext4 with no reserved blocks and no discard (the image stays a plain file).
func Format(ctx context.Context, image string, size int64) error {
	if size < MinBytes || size > MaxBytes {
		return fmt.Errorf("loopdisk: size %d outside [%d, %d]", size, MinBytes, MaxBytes)
	}
	f, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("loopdisk: create %s: %w", image, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(image)
		return fmt.Errorf("loopdisk: size %s: %w", image, err)
	}
	mkfs, err := mkfsPath()
	if err != nil {
		_ = os.Remove(image)
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, mkfsTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, mkfs, "-q", "-F", "-t", FSType, "-m", "0",
		"-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0", image)
	var out capped
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if err := cmd.Run(); err != nil {
		_ = os.Remove(image)
		return fmt.Errorf("loopdisk: mkfs.ext4 %s: %w: %s", image, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// capped keeps the first maxMkfsOutput bytes written to it.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxMkfsOutput - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Mount attaches image to a free loop device (autoclear) and mounts it at dir (an
// existing directory) nosuid,nodev. The root of the new filesystem is made 0700 and its
// lost+found removed, so dir looks as an empty directory the agent made.
func Mount(image, dir string) error {
	if err := attachMount(image, dir); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		_ = Unmount(dir)
		return fmt.Errorf("loopdisk: chmod %s: %w", dir, err)
	}
	if err := os.Remove(filepath.Join(dir, "lost+found")); err != nil && !errors.Is(err, os.ErrNotExist) {
		_ = Unmount(dir)
		return fmt.Errorf("loopdisk: remove lost+found in %s: %w", dir, err)
	}
	return nil
}

// attachMount opens image (never through a symlink), attaches it to a free loop device
// (autoclear) and mounts that at dir nosuid,nodev. The mount holds the device from then
// on; closing the loop file on return is what lets autoclear detach it once the mount
// goes.
func attachMount(image, dir string) error {
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

// attach configures a free loop device over img and returns it open.
func attach(img *os.File, name string) (*os.File, string, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("loopdisk: open /dev/loop-control: %w", err)
	}
	defer func() { _ = ctl.Close() }()
	cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], name)
	var last error
	for range configureAttempts {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, "", fmt.Errorf("loopdisk: LOOP_CTL_GET_FREE: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		loop, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if errors.Is(err, os.ErrNotExist) {
			// A container's /dev (a privileged pod) lists only the loop devices that
			// existed when it started: make the node of the one the kernel just added.
			if merr := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(loopMajor, uint32(n)))); merr == nil || errors.Is(merr, os.ErrExist) {
				loop, err = os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			last = fmt.Errorf("open %s: %w", dev, err)
			continue
		}
		if err := unix.IoctlLoopConfigure(int(loop.Fd()), &cfg); err != nil {
			_ = loop.Close()
			last = fmt.Errorf("LOOP_CONFIGURE %s: %w", dev, err)
			if errors.Is(err, unix.EBUSY) {
				continue // another user took it between GET_FREE and CONFIGURE
			}
			return nil, "", fmt.Errorf("loopdisk: %w", last)
		}
		return loop, dev, nil
	}
	return nil, "", fmt.Errorf("loopdisk: no free loop device after %d attempts: %w", configureAttempts, last)
}

// Unmount unmounts dir; when something still holds the filesystem (an open descriptor,
// a sandbox's clone of a root) it is detached lazily and goes, with its loop device, when
// the last user does. An unmounted dir is not an error.
func Unmount(dir string) error {
	err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("loopdisk: unmount %s: %w", dir, err)
	}
	return nil
}

// MountInfo is one mount of this process's mount namespace.
type MountInfo struct {
	Point  string // mount point
	FSType string
	Source string // e.g. /dev/loop3
}

// MountsUnder lists the mounts at or below dir, deepest last as the kernel lists them.
func MountsUnder(dir string) ([]MountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("loopdisk: %w", err)
	}
	defer func() { _ = f.Close() }()
	dir = filepath.Clean(dir)
	var out []MountInfo
	sc := bufio.NewScanner(io.LimitReader(f, maxMountinfoBytes))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		m, ok := parseMountinfo(sc.Text())
		if ok && (dir == "/" || m.Point == dir || strings.HasPrefix(m.Point, dir+"/")) {
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("loopdisk: read mountinfo: %w", err)
	}
	return out, nil
}

// parseMountinfo parses one line of /proc/self/mountinfo (proc(5)).
func parseMountinfo(line string) (MountInfo, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return MountInfo{}, false
	}
	f := strings.Fields(pre)
	g := strings.Fields(post)
	if len(f) < 5 || len(g) < 2 {
		return MountInfo{}, false
	}
	return MountInfo{Point: unescape(f[4]), FSType: g[0], Source: unescape(g[1])}, true
}

// unescape undoes mountinfo's octal escapes (\040 for space and the like).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// BackingFile is the file a loop device (/dev/loopN) is attached to ("" when detached);
// the kernel appends " (deleted)" once the file was removed.
func BackingFile(dev string) string {
	name := filepath.Base(dev)
	if !strings.HasPrefix(name, "loop") {
		return ""
	}
	b, err := os.ReadFile(filepath.Join("/sys/block", name, "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// LoopsBackedBy lists the attached loop devices whose backing file lies in dir.
func LoopsBackedBy(dir string) ([]string, error) {
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return nil, fmt.Errorf("loopdisk: %w", err)
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "loop") {
			continue
		}
		bf := strings.TrimSuffix(BackingFile(e.Name()), " (deleted)")
		if bf != "" && strings.HasPrefix(bf, dir+"/") {
			out = append(out, "/dev/"+e.Name())
		}
	}
	return out, nil
}

// Detach detaches a loop device no mount uses (LOOP_CLR_FD); with autoclear set a busy
// device detaches when its last user goes.
func Detach(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopdisk: open %s: %w", dev, err)
	}
	defer func() { _ = f.Close() }()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("loopdisk: LOOP_CLR_FD %s: %w", dev, err)
	}
	return nil
}

// errExhausted is the storage-exhausted refusal.
func errExhausted(format string, args ...any) error {
	return actuation.Refusef(actuation.CodeStorageExhausted, format, args...)
}

//go:build darwin

package vfkitsystem

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ProcessIdentityOf reads pid's start time from the kernel (sysctl kern.proc.pid,
// kinfo_proc.kp_proc.p_starttime) in microseconds since the epoch.
func ProcessIdentityOf(pid int) (ProcessIdentity, error) {
	if pid <= 0 {
		return ProcessIdentity{}, fmt.Errorf("pid %d", pid)
	}
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return ProcessIdentity{}, fmt.Errorf("process %d: %w", pid, err)
	}
	if int(kp.Proc.P_pid) != pid {
		return ProcessIdentity{}, fmt.Errorf("process %d: not running", pid)
	}
	st := kp.Proc.P_starttime
	id := ProcessIdentity{PID: pid, Start: st.Sec*1_000_000 + int64(st.Usec)}
	if pid == os.Getpid() {
		id.Executable, _ = os.Executable()
	}
	return id, nil
}

// StatFile returns path's identity (without following a final symlink).
func StatFile(path string) (FileIdentity, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		if os.IsNotExist(err) {
			return FileIdentity{}, os.ErrNotExist
		}
		return FileIdentity{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return FileIdentity{Path: path, Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size}, nil
}

// cloneFile makes dst an APFS clone of src (clonefile(2): copy-on-write, no data copied,
// an inode of its own; it fails rather than copying on a filesystem without clones).
func cloneFile(src, dst string) error {
	if err := unix.Clonefile(src, dst, unix.CLONE_NOFOLLOW); err != nil {
		return fmt.Errorf("clonefile %s -> %s: %w", src, dst, err)
	}
	return nil
}

//go:build linux

package vfkitsystem

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ProcessIdentityOf reads pid's start time from /proc/<pid>/stat (field 22, clock ticks
// since boot). On Linux this serves the platform-neutral recovery code's tests; the
// backend itself runs on macOS (ident_darwin.go).
func ProcessIdentityOf(pid int) (ProcessIdentity, error) {
	if pid <= 0 {
		return ProcessIdentity{}, fmt.Errorf("pid %d", pid)
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcessIdentity{}, fmt.Errorf("process %d: %w", pid, err)
	}
	// The command name (field 2) is parenthesised and may hold spaces: parse after it.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ProcessIdentity{}, fmt.Errorf("process %d: malformed stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ProcessIdentity{}, fmt.Errorf("process %d: short stat", pid)
	}
	start, err := strconv.ParseInt(f[19], 10, 64) // field 22 overall
	if err != nil {
		return ProcessIdentity{}, fmt.Errorf("process %d: start time: %w", pid, err)
	}
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return ProcessIdentity{PID: pid, Start: start, Executable: exe}, nil
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
	return FileIdentity{Path: path, Dev: st.Dev, Ino: st.Ino, Size: st.Size}, nil
}

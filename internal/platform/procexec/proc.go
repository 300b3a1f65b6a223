package procexec

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/platform/procexec/sandboxhelper"
)

// Stat is the subset of /proc/<pid>/stat the runtime relies on (parsed by the
// sandbox helper's package, which lists a sandbox's leftovers with it).
type Stat = sandboxhelper.Stat

// ReadStat parses /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) { return sandboxhelper.ReadStat(pid) }

// ReadTaskStat parses /proc/<pid>/task/<tid>/stat: one thread's state (its Pid is tid).
func ReadTaskStat(pid, tid int) (Stat, error) { return sandboxhelper.ReadTaskStat(pid, tid) }

// ProcessStartTime returns field 22 of /proc/<pid>/stat.
func ProcessStartTime(pid int) (uint64, error) {
	st, err := ReadStat(pid)
	if err != nil {
		return 0, err
	}
	return st.StartTime, nil
}

// GroupExists probes the process group with kill(-pgid, 0). It returns false
// only on ESRCH, i.e. when the kernel confirms that no process (not even an
// unreaped zombie) of the group remains.
func GroupExists(pgid int) (bool, error) {
	if pgid <= 1 {
		return false, fmt.Errorf("probe process group %d: refusing to address pgid <= 1", pgid)
	}
	err := unix.Kill(-pgid, 0)
	switch {
	case err == nil, errors.Is(err, unix.EPERM):
		return true, nil
	case errors.Is(err, unix.ESRCH):
		return false, nil
	default:
		return true, fmt.Errorf("probe process group %d: %w", pgid, err)
	}
}

// SignalGroup sends sig to every process of the group. ESRCH (group already
// gone) is not an error.
func SignalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("signal process group %d: refusing to address pgid <= 1", pgid)
	}
	if err := unix.Kill(-pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal process group %d with %s: %w", pgid, unix.SignalName(sig), err)
	}
	return nil
}

// SessionMembers scans /proc for live or zombie processes whose session id is
// sid. It catches members that moved to another process group of the same
// session (job control), which a kill(-pgid) would miss.
func SessionMembers(sid int) ([]Stat, error) {
	return scanProc(func(st Stat) bool { return st.Sid == sid })
}

// GroupMembers scans /proc for live or zombie processes of process group pgid.
func GroupMembers(pgid int) ([]Stat, error) {
	return scanProc(func(st Stat) bool { return st.Pgid == pgid })
}

// scanProc returns the /proc entries whose stat matches keep.
func scanProc(keep func(Stat) bool) ([]Stat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan /proc: %w", err)
	}
	defer func() { _ = d.Close() }()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("scan /proc: %w", err)
	}
	var out []Stat
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		st, err := ReadStat(pid)
		if err != nil {
			continue // exited while scanning
		}
		if keep(st) {
			out = append(out, st)
		}
	}
	return out, nil
}

// ReapGroup reaps every child of the caller that belongs to process group
// pgid, blocking until none is left (ECHILD). It returns the wait status of
// each reaped pid. Because descendants are re-parented to a subreaper before
// their parent becomes waitable, a subreaper that gets ECHILD here has reaped
// the whole group; callers confirm with GroupExists.
func ReapGroup(pgid int) (map[int]unix.WaitStatus, error) {
	if pgid <= 1 {
		return nil, fmt.Errorf("reap process group %d: refusing to address pgid <= 1", pgid)
	}
	out := map[int]unix.WaitStatus{}
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-pgid, &ws, 0, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			return out, nil
		case err != nil:
			return out, fmt.Errorf("wait4(-%d): %w", pgid, err)
		}
		out[pid] = ws
	}
}

// ExitDescription renders a wait status as (exit code, signal name). The exit
// code is -1 when the process was killed by a signal.
func ExitDescription(ws unix.WaitStatus) (code int, signal string) {
	switch {
	case ws.Exited():
		return ws.ExitStatus(), ""
	case ws.Signaled():
		return -1, unix.SignalName(ws.Signal())
	default:
		return -1, ""
	}
}

// HostPid translates a pid as seen inside the PID namespace of holder (for a
// sandbox: its helper, PID 1 of the namespace) into the host's pid. It scans
// /proc for the process of that namespace whose NSpid ends with inner.
func HostPid(holder, inner int) (int, error) {
	ns, err := os.Readlink("/proc/" + strconv.Itoa(holder) + "/ns/pid")
	if err != nil {
		return 0, fmt.Errorf("PID namespace of %d: %w", holder, err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("list /proc: %w", err)
	}
	want := []byte(strconv.Itoa(inner))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || l != ns {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "NSpid:" && bytes.Equal(f[len(f)-1], want) {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no process %d in the PID namespace %s of %d: %w", inner, ns, holder, syscall.ESRCH)
}

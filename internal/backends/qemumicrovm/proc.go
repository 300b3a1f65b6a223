package qemumicrovm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/platform/procexec"
)

// ProcIdentity identifies one process incarnation across pid reuse: the pid plus its
// start time (field 22 of /proc/<pid>/stat, clock ticks since boot), and the executable
// it ran when it was recorded.
type ProcIdentity struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
	Exe       string `json:"exe,omitempty"`
}

func (p ProcIdentity) String() string {
	return fmt.Sprintf("pid %d (start %d)", p.Pid, p.StartTime)
}

// identify reads the identity of a live pid.
func identify(pid int) (ProcIdentity, error) {
	st, err := procexec.ReadStat(pid)
	if err != nil {
		return ProcIdentity{}, err
	}
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return ProcIdentity{Pid: pid, StartTime: st.StartTime, Exe: exe}, nil
}

// procHandle is a pidfd proven to refer to one recorded incarnation. Signals go through
// the pidfd, so a recycled pid is never signalled.
type procHandle struct {
	fd int
	id ProcIdentity
}

// openExact opens a pidfd for id. It returns (nil, nil) when the recorded incarnation is
// gone: no such pid, the pid now belongs to another process (different start time), or
// the process already exited (a zombie whose parent has not reaped it yet).
//
// Why this proves identity: the pidfd refers to whatever process had the pid when it was
// opened; if that was not the recorded incarnation, /proc/<pid>/stat read afterwards
// shows another start time (the same pid cannot return to an earlier start time).
func openExact(id ProcIdentity) (*procHandle, error) {
	if id.Pid <= 1 || id.StartTime == 0 {
		return nil, nil
	}
	fd, err := unix.PidfdOpen(id.Pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, nil
		}
		return nil, fmt.Errorf("pidfd_open %d: %w", id.Pid, err)
	}
	st, err := procexec.ReadStat(id.Pid)
	if err != nil || st.StartTime != id.StartTime {
		unix.Close(fd)
		return nil, nil
	}
	h := &procHandle{fd: fd, id: id}
	if h.exited() {
		h.close()
		return nil, nil
	}
	return h, nil
}

// exited reports whether the process has exited (the pidfd is readable once it has).
func (h *procHandle) exited() bool {
	return h.waitExit(0)
}

// waitExit waits up to d for the process to exit and reports whether it did.
func (h *procHandle) waitExit(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms < 0 {
			ms = 0
		}
		fds := []unix.PollFd{{Fd: int32(h.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false
		}
		return n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0
	}
}

// kill sends SIGKILL through the pidfd and waits up to d for the exit.
func (h *procHandle) kill(d time.Duration) error {
	if err := unix.PidfdSendSignal(h.fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %s: %w", h.id, err)
	}
	if !h.waitExit(d) {
		return fmt.Errorf("%s still running %v after SIGKILL", h.id, d)
	}
	return nil
}

// signal sends sig through the pidfd (never to a recycled pid).
func (h *procHandle) signal(sig unix.Signal) error {
	if err := unix.PidfdSendSignal(h.fd, sig, nil, 0); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, h.id, err)
	}
	return nil
}

func (h *procHandle) close() {
	if h != nil && h.fd >= 0 {
		unix.Close(h.fd)
		h.fd = -1
	}
}

// killExact kills the recorded incarnation if it still runs. It reports whether a process
// was killed; a gone or recycled pid is left alone.
func killExact(id ProcIdentity, wait time.Duration) (bool, error) {
	h, err := openExact(id)
	if err != nil || h == nil {
		return false, err
	}
	defer h.close()
	return true, h.kill(wait)
}

// Bounds of the /proc scan.
const (
	maxProcEntries = 1 << 16
	maxCmdline     = 64 << 10
)

// scanOwned lists live processes running one of bins (resolved executable paths) whose
// command line mentions dir+"/". It finds VMM and device processes of a VM directory that
// no record names (a crash between a launch and its record update), so they are never
// left running. Other processes are never matched: both the executable and the private
// directory must agree.
func scanOwned(dir string, bins []string) ([]ProcIdentity, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan /proc: %w", err)
	}
	if len(ents) > maxProcEntries {
		ents = ents[:maxProcEntries]
	}
	needle := []byte(filepath.Clean(dir) + "/")
	self := os.Getpid()
	var out []ProcIdentity
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == self {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil {
			continue
		}
		exe = strings.TrimSuffix(exe, " (deleted)")
		match := false
		for _, b := range bins {
			match = match || exe == b
		}
		if !match {
			continue
		}
		cmd, err := readBounded("/proc/"+e.Name()+"/cmdline", maxCmdline)
		if err != nil {
			continue
		}
		if !bytes.Contains(cmd, needle) {
			// Confined VMM processes name their directory through a descriptor; the
			// launch puts it in their environment.
			env, err := readBounded("/proc/"+e.Name()+"/environ", maxCmdline)
			if err != nil || !bytes.Contains(append([]byte{0}, env...), []byte("\x00"+vmDirEnv+"="+filepath.Clean(dir)+"\x00")) {
				continue
			}
		}
		id, err := identify(pid)
		if err != nil {
			continue
		}
		out = append(out, id)
	}
	return out, nil
}

func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return io.ReadAll(io.LimitReader(f, max))
}

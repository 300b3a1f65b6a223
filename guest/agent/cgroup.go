package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// CommandCgroups are the guest supervisor's own limits (defence in depth inside the VM):
// every spawned command and PTY session starts in a cgroup v2 group of its own beneath
// Parent (clone3 CLONE_INTO_CGROUP: it never runs a moment outside it) with pids.max and
// memory.max, and the group is killed (cgroup.kill) and removed when the command ends, so
// no descendant outlives it. Parent is the cgroup delegated to the agent (systemd
// Delegate=yes); the agent itself moves to Parent/agent (no process in an inner node).
type CommandCgroups struct {
	Parent      string
	Pids        int64 // pids.max of each command (0: unlimited)
	MemoryBytes int64 // memory.max of each command (0: unlimited)
	// Logf receives why a command's group could not be removed (nil discards it).
	Logf func(format string, args ...any)
	seq  atomic.Uint64
}

// cgroupRoot is where cgroup v2 is mounted in the full-system guest.
const cgroupRoot = "/sys/fs/cgroup"

// SetupCommandCgroups prepares the delegated cgroup the agent runs in (read from
// /proc/self/cgroup) for per-command groups. It fails when the guest has no cgroup v2 or
// the pids/memory controllers cannot be enabled; the caller then runs without (and the
// host does not claim guest-pids for such an image).
func SetupCommandCgroups(pids, memoryBytes int64) (*CommandCgroups, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	rel := ""
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			rel = p
		}
	}
	if rel == "" || rel == "/" {
		return nil, errors.New("no delegated cgroup v2 group (not started by systemd with Delegate=yes?)")
	}
	parent := filepath.Join(cgroupRoot, filepath.Clean(rel))
	if filepath.Base(parent) == "agent" {
		parent = filepath.Dir(parent) // a restarted agent already moved itself
	}
	self := filepath.Join(parent, "agent")
	if err := os.Mkdir(self, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(self, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return nil, fmt.Errorf("move the agent to %s: %w", self, err)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids +memory"), 0); err != nil {
		return nil, fmt.Errorf("enable pids and memory beneath %s: %w", parent, err)
	}
	return &CommandCgroups{Parent: parent, Pids: pids, MemoryBytes: memoryBytes}, nil
}

// commandGroup is one command's cgroup.
type commandGroup struct {
	dir  string
	fd   int
	logf func(format string, args ...any) // nil: diagnostics discarded
}

// create makes a new command group with the limits and returns it open (its fd goes to
// SysProcAttr.CgroupFD).
func (c *CommandCgroups) create() (*commandGroup, error) {
	dir := filepath.Join(c.Parent, "cmd-"+strconv.FormatUint(c.seq.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	g := &commandGroup{dir: dir, fd: -1, logf: c.Logf}
	set := func(file string, v int64) error {
		s := "max"
		if v > 0 {
			s = strconv.FormatInt(v, 10)
		}
		return os.WriteFile(filepath.Join(dir, file), []byte(s), 0)
	}
	if err := set("pids.max", c.Pids); err != nil {
		g.remove()
		return nil, err
	}
	if err := set("memory.max", c.MemoryBytes); err != nil {
		g.remove()
		return nil, err
	}
	_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		g.remove()
		return nil, err
	}
	g.fd = fd
	return g, nil
}

// removeTimeout bounds how long remove waits for a killed group to empty.
const removeTimeout = 2 * time.Second

// errStillPopulated: the group still held a process when removeTimeout passed.
var errStillPopulated = errors.New("still populated after cgroup.kill")

// remove kills what is left in the group and removes it; a group that cannot be removed
// is reported through Logf with the reason (it stays; its pids/memory limits still hold
// whatever remains in it).
func (g *commandGroup) remove() {
	if g == nil {
		return
	}
	if err := g.release(time.Now().Add(removeTimeout)); err != nil && g.logf != nil {
		g.logf("command cgroup %s not removed: %v", g.dir, err)
	}
}

// release writes cgroup.kill, waits until cgroup.events reports "populated 0" (woken by
// the kernel's notification on that file, not by sleeping; bounded by deadline) and
// removes the directory.
func (g *commandGroup) release(deadline time.Time) error {
	if g.fd >= 0 {
		_ = unix.Close(g.fd)
		g.fd = -1
	}
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cgroup.kill: %w", err)
	}
	if err := waitUnpopulated(filepath.Join(g.dir, "cgroup.events"), deadline); err != nil {
		return err
	}
	if err := unix.Rmdir(g.dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rmdir: %w", err)
	}
	return nil
}

// maxEventsBytes bounds one read of cgroup.events (a few short "key value" lines).
const maxEventsBytes = 512

// waitUnpopulated returns when the cgroup.events file says "populated 0" or is gone (the
// group was removed). Between reads it waits in poll(2) for POLLPRI, which the kernel
// raises on every change of the file after it was opened, so a change between a read and
// the poll is never missed. It gives up at deadline with errStillPopulated.
func waitUnpopulated(events string, deadline time.Time) error {
	f, err := os.Open(events)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, maxEventsBytes)
	for {
		n, err := f.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s: %w", events, err)
		}
		if !populated(buf[:n]) {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%s: %w (waited %v)", events, errStillPopulated, removeTimeout)
		}
		pfd := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLPRI}}
		if _, err := unix.Poll(pfd, int(left/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll %s: %w", events, err)
		}
	}
}

// populated reports whether cgroup.events content says the group (or a descendant)
// holds a process: any line other than "populated 0" under that key counts as populated.
func populated(events []byte) bool {
	for _, l := range strings.Split(string(events), "\n") {
		if v, ok := strings.CutPrefix(l, "populated "); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return true
}

// ReadKernelLimit returns the integer value of a "name=value" word of the kernel command
// line (0 when absent or malformed).
func ReadKernelLimit(name string) int64 {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return 0
	}
	for _, w := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(w, name+"="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil && n > 0 && n <= 1<<22 {
				return n
			}
		}
	}
	return 0
}

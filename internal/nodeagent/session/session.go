package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/charmbracelet/x/vt"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// Spec describes a session. Argv is data: Argv[0] is an absolute executable
// and no shell or PATH lookup is involved.
type Spec struct {
	ID            string
	EnvironmentID string
	Argv          []string
	// Env is the complete environment ("K=V"); nil means empty. The agent's
	// environment is never inherited.
	Env []string
	// Dir is the absolute working directory: under one of the roots, or ""
	// (or "/") for the session's private temp dir.
	Dir string
	// WritableRoots and ReadableRoots are the host directories the program
	// sees (at the same paths), read-write or read-only. Nothing else of the
	// host is visible but a read-only system set (procexec.SandboxSpec).
	WritableRoots []string
	ReadableRoots []string
	// HostRelay marks the agent's own guest PTY relay (argv[0] is the agent
	// binary in its relay mode): the program the operator asked for runs in
	// the VM guest, and the relay, which must reach the VM's socket, runs
	// without the host sandbox. Never set it for anything else.
	HostRelay bool
	// GitMetadataWritable: see procexec.SandboxSpec (the profile's gitMetadata: Writable).
	GitMetadataWritable bool
	Rows, Cols          uint16
	// IdleTimeout: no output for this long moves Running -> Idle (0 selects
	// DefaultIdleTimeout, negative disables). MaxDuration: the session is
	// terminated and ends Expired (0 selects DefaultMaxDuration). Grace: the
	// SIGTERM -> SIGKILL grace period (0 selects DefaultGrace).
	IdleTimeout time.Duration
	MaxDuration time.Duration
	Grace       time.Duration
	// EventBufferDepth overrides the ring depth (<= Caps.EventBufferDepth).
	EventBufferDepth int
	// BeforeConfig, when set, runs after the sandbox helper is started (and
	// placed in the session's cgroup) and before it is configured.
	BeforeConfig func(pid int) error
	// Resources are the session's cgroup limits (with a cgroup manager; zero
	// fields select procexec.ResolveLimits defaults).
	Resources cgroups.Limits
	// FileSizeLimit, when > 0, is the program's RLIMIT_FSIZE (EFBIG past it).
	FileSizeLimit int64
}

// Info identifies a session's processes (for status and crash recovery).
type Info struct {
	Pid  int
	Pgid int
	Sid  int
	// StartTime is /proc/<pid>/stat field 22 (clock ticks since boot);
	// (Pid, StartTime) survives pid reuse as an identity.
	StartTime uint64
	TTY       string
	Started   time.Time
}

// Exit describes how a session ended.
type Exit struct {
	Code   int    // -1 when killed by a signal or unknown
	Signal string // e.g. "SIGKILL"
	Origin string // "exit", "close", "expired", "killed", "failed"
}

type origin string

const (
	originExit   origin = "exit"
	originClose  origin = "close"
	originExpire origin = "expired"
	originKill   origin = "killed"
	originFail   origin = "failed"
)

var finalPhase = map[origin]Phase{
	originExit: PhaseClosed, originClose: PhaseClosed, originExpire: PhaseExpired,
	originKill: PhaseKilled, originFail: PhaseFailed,
}

// Session is one PTY session.
type Session struct {
	m    *Manager
	spec Spec
	ring *ring.Ring
	info Info

	master  *os.File
	process *os.Process
	sb      *procexec.Sandboxed // nil for a HostRelay
	tmpDir  string
	start0  time.Time
	cg      *cgroups.Group
	cgRep   *procexec.CgroupReport // set once by the teardown

	screenMu     sync.Mutex
	emu          *vt.Emulator // nil until a screen is first asked for (screen.go)
	rows, cols   uint16       // the current terminal size (guarded by screenMu)
	screenClosed bool         // the session was cleaned up: replies are no longer drained
	screenSeq    uint64       // the last ring event the screen model has consumed
	screenGap    bool         // the model was rebuilt after the ring evicted output it never saw

	inputQ     chan []byte  // capacity InputQueueDepth+1: the extra slot takes a direct write's remainder
	inMu       sync.Mutex   // orders Input calls: a direct write and its remainder, or one enqueue
	inPending  atomic.Int64 // input writes queued or being written by the writer
	stopWriter chan struct{}
	writerDone chan struct{}
	pumpDone   chan struct{}
	pumpErr    error
	replyDone  chan struct{}

	lastOutput atomic.Int64 // nanoseconds since start0

	phaseMu sync.Mutex
	phase   atomic.Value // Phase
	history []PhaseChange

	mu          sync.Mutex
	pending     *termRequest // Close/Kill that arrived while starting
	terminating bool
	origin      origin
	reaped      bool
	leaderDead  bool
	graceTimer  *time.Timer
	maxTimer    *time.Timer
	idleTimer   *time.Timer
	statuses    map[int]unix.WaitStatus
	retries     int
	cleanupErr  error

	cleanupMu sync.Mutex // serialises cleanup attempts
	cleaned   atomic.Bool
	exit      Exit
	done      chan struct{}
}

func newSession(m *Manager, spec Spec, rg *ring.Ring) *Session {
	s := &Session{
		m:          m,
		spec:       spec,
		ring:       rg,
		inputQ:     make(chan []byte, m.caps.InputQueueDepth+1),
		stopWriter: make(chan struct{}),
		writerDone: make(chan struct{}),
		pumpDone:   make(chan struct{}),
		replyDone:  make(chan struct{}),
		statuses:   map[int]unix.WaitStatus{},
		done:       make(chan struct{}),
		// The screen model (emu) is built on the first Screen or Resize that needs it,
		// from the ring: an idle session nobody looks at holds no emulator.
		rows: spec.Rows,
		cols: spec.Cols,
	}
	s.phase.Store(Phase(""))
	return s
}

// start spawns the program on a fresh PTY and starts the pumps and timers.
func (s *Session) start() error {
	var pre *preTerm // a pre-started helper on its own PTY (prestart.go), or nil
	if !s.spec.HostRelay {
		pre = s.m.takePrestarted()
	}
	preUsed := false
	defer func() {
		if pre != nil && !preUsed {
			pre.pt.Discard() // the start failed before the helper was configured
		}
	}()
	var master, tty *os.File
	if pre != nil {
		master, tty = pre.master, pre.tty
	} else {
		var err error
		if master, tty, err = pty.Open(); err != nil {
			return fmt.Errorf("allocate pty: %w", err)
		}
		if master, err = pollableMaster(master); err != nil {
			_ = tty.Close()
			return err
		}
	}
	defer func() { _ = tty.Close() }()
	// Size through the tty side: pty.Setsize calls Fd(), which would put the
	// master back into blocking mode.
	if err := pty.Setsize(tty, &pty.Winsize{Rows: s.spec.Rows, Cols: s.spec.Cols}); err != nil {
		_ = master.Close()
		return fmt.Errorf("size pty: %w", err)
	}
	if s.m.cgroups != nil {
		g, err := procexec.CreateCgroup(s.m.cgroups, cgroups.KindSession, procexec.CgroupID(s.spec.ID), s.spec.Resources)
		if err != nil {
			_ = master.Close()
			return err
		}
		s.cg, s.spec.Resources = g, procexec.ResolveLimits(s.spec.Resources)
	}
	var cmd *exec.Cmd
	if s.spec.HostRelay {
		cmd = &exec.Cmd{
			Path:        s.spec.Argv[0],
			Args:        s.spec.Argv,
			Env:         s.spec.Env,
			Dir:         "/",
			Stdin:       tty,
			Stdout:      tty,
			Stderr:      tty,
			SysProcAttr: &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0},
		}
		start := cmd.Start
		if s.cg != nil {
			start = func() error { return s.cg.StartCmd(cmd) } // born inside its cgroup
		}
		if err := start(); err != nil {
			_ = master.Close()
			s.dropCgroup()
			return fmt.Errorf("start %s: %w", s.spec.Argv[0], err)
		}
	} else {
		tmp, err := os.MkdirTemp(s.m.sandbox.TempBase, "session-")
		if err != nil {
			_ = master.Close()
			s.dropCgroup()
			return fmt.Errorf("create the session's private temp dir: %w", err)
		}
		dir := s.spec.Dir
		if dir == "/" {
			dir = ""
		}
		// Into the cgroup before the helper is configured: it does nothing before.
		before := s.spec.BeforeConfig
		if s.cg != nil {
			before = func(pid int) error {
				if err := procexec.EnterCgroup(s.cg, pid); err != nil {
					return err
				}
				if s.spec.BeforeConfig != nil {
					return s.spec.BeforeConfig(pid)
				}
				return nil
			}
		}
		sspec := procexec.SandboxSpec{
			Argv: s.spec.Argv, Env: s.spec.Env, Dir: dir,
			WritableRoots: s.spec.WritableRoots, ReadableRoots: s.spec.ReadableRoots,
			TempDir: tmp, TTY: tty.Name(),
			GitMetadataWritable: s.spec.GitMetadataWritable,
			TempBytes:           s.m.sandbox.TempBytes, FileSizeLimit: s.spec.FileSizeLimit,
		}
		var sb *procexec.Sandboxed
		if pre != nil {
			preUsed = true // Start discards the helper itself if it fails
			sb, err = pre.pt.Start(sspec, before)
		} else {
			sb, err = procexec.StartSandboxed(sspec, procexec.StartOptions{
				HelperPath: s.m.sandbox.HelperPath, UID: s.m.sandbox.UID,
				Stdin: tty, Stdout: tty, Stderr: tty, Terminal: true,
				BeforeConfig: before,
			})
		}
		if err != nil {
			_ = os.RemoveAll(tmp)
			_ = master.Close()
			s.dropCgroup()
			if string(actuation.CodeOf(err)) != "" {
				return err
			}
			return fmt.Errorf("start %s: %w", s.spec.Argv[0], err)
		}
		cmd, s.sb, s.tmpDir = sb.Cmd, sb, tmp
	}
	pid := cmd.Process.Pid
	info := Info{Pid: pid, Pgid: pid, Sid: pid, TTY: tty.Name(), Started: time.Now()}
	// The leader is our unreaped child: its /proc entry exists even if it
	// already exited.
	if st, err := procexec.ProcessStartTime(pid); err == nil {
		info.StartTime = st
	}
	s.start0 = info.Started
	s.master = master
	s.process = cmd.Process

	// Running is entered before anything that can move the session on
	// (leader exit, timers, a pending Close), so every later transition
	// starts from Running.
	s.setPhase(PhaseRunning, "started")
	go s.pumpOutput()
	go s.writeInput()
	s.mu.Lock()
	s.info = info
	s.maxTimer = time.AfterFunc(s.spec.MaxDuration, func() { s.terminate(originExpire, false, "max duration reached") })
	if s.spec.IdleTimeout > 0 {
		s.idleTimer = time.AfterFunc(s.spec.IdleTimeout, s.onIdleTimer)
	}
	pending := s.pending
	s.mu.Unlock()
	go s.waitLeader()
	if pending != nil {
		s.terminate(pending.origin, pending.immediate, pending.reason)
	}
	return nil
}

// pollableMaster re-wraps the PTY master as a non-blocking, poller-managed
// file. creack/pty's Open calls Fd() on the master (ptsname/unlockpt ioctls),
// which switches it to blocking mode; a blocking master would let a reader or
// a writer stuck on a full terminal buffer ignore deadlines and Close.
func pollableMaster(f *os.File) (*os.File, error) {
	defer func() { _ = f.Close() }()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup pty master: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pty master O_NONBLOCK: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil // non-blocking fd => pollable File
}

// ID returns the session ID.
func (s *Session) ID() string { return s.spec.ID }

// EnvironmentID returns the owning environment.
func (s *Session) EnvironmentID() string { return s.spec.EnvironmentID }

// Info returns the process identity (zero until the program started).
func (s *Session) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

// Phase returns the current phase.
func (s *Session) Phase() Phase { return s.phase.Load().(Phase) }

// History returns the most recent phase changes (bounded).
func (s *Session) History() []PhaseChange {
	s.phaseMu.Lock()
	defer s.phaseMu.Unlock()
	return append([]PhaseChange(nil), s.history...)
}

// Done is closed when the session reached a terminal phase.
func (s *Session) Done() <-chan struct{} { return s.done }

// Exit returns how the session ended (valid after Done).
func (s *Session) Exit() Exit {
	<-s.done
	return s.exit
}

// CgroupReport is what the session's cgroup teardown found (nil without a cgroup
// manager or before the teardown ran).
func (s *Session) CgroupReport() *procexec.CgroupReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cgRep
}

// dropCgroup removes the cgroup of a session whose program never started.
func (s *Session) dropCgroup() {
	if s.cg != nil {
		_, _ = s.cg.Kill()
		_ = s.cg.Delete()
	}
}

// CleanupComplete is true only once the kernel confirmed (kill(-pgid, 0) ==
// ESRCH and no process left in the session) that nothing of it remains.
func (s *Session) CleanupComplete() bool { return s.cleaned.Load() }

// Events exposes the session's event ring (read-only use: Read, Wait, Stats).
func (s *Session) Events() *ring.Ring { return s.ring }

// Read reads events after cursor (see ring.Ring.Read).
func (s *Session) Read(cursor uint64, max int) ([]ring.Event, uint64, *ring.Gap) {
	return s.ring.Read(cursor, max)
}

// WaitEvents long-polls for an event after afterSeq. It holds a reader-task
// permit while waiting and is refused with reader-cap-reached when none is
// free.
func (s *Session) WaitEvents(ctx context.Context, afterSeq uint64) error {
	if err := s.m.acquireReader(); err != nil {
		return err
	}
	defer s.m.releaseReader()
	return s.ring.Wait(ctx, afterSeq)
}

func (s *Session) setPhase(to Phase, reason string) bool {
	s.phaseMu.Lock()
	defer s.phaseMu.Unlock()
	from := s.Phase()
	ok := false
	for _, p := range transitions[from] {
		ok = ok || p == to
	}
	if !ok {
		return false
	}
	s.phase.Store(to)
	seq, _ := s.ring.Append(ring.KindStatus, []byte(to))
	pc := PhaseChange{
		SessionID: s.spec.ID, EnvironmentID: s.spec.EnvironmentID,
		From: from, To: to, Reason: reason, Time: time.Now(), Seq: seq,
	}
	if len(s.history) >= historyCap {
		s.history = append(s.history[:0], s.history[1:]...)
	}
	s.history = append(s.history, pc)
	if s.m.observer != nil {
		s.m.observer(pc)
	}
	return true
}

func (s *Session) accepting() error {
	switch p := s.Phase(); p {
	case PhaseRunning, PhaseIdle:
		return nil
	default:
		return actuation.Refusef(actuation.CodeSessionNotRunning, "session %q is %s", s.spec.ID, p)
	}
}

// Input queues bytes for the program. It never blocks: a full queue is
// refused with queue-full; oversized writes with input-too-large. Input bytes
// are never retained; the ring records only their count.
func (s *Session) Input(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if len(b) > s.m.caps.MaxInputBytes {
		return actuation.Refusef(actuation.CodeInputTooLarge, "%d bytes exceed the per-write cap %d", len(b), s.m.caps.MaxInputBytes)
	}
	if err := s.accepting(); err != nil {
		return err
	}
	// A keystroke goes straight to the terminal when nothing is queued before it: one
	// non-blocking write from the caller, no hand-off to the writer goroutine. What the
	// terminal does not take at once (its input buffer is full) is queued, in order, for
	// the writer, which then takes every later input until the queue is empty again.
	// inMu is held only around non-blocking steps (one write attempt, a channel send
	// that has room), so Input never waits for the terminal. Only an enqueue raises
	// inPending, under inMu, and the writer lowers it once its write is done and
	// recorded: nothing pending under inMu means nothing queued and no write in flight,
	// so a direct write cannot overtake or interleave with an earlier input.
	s.inMu.Lock()
	defer s.inMu.Unlock()
	if s.inPending.Load() != 0 {
		return s.enqueue(b, false)
	}
	n := s.writeNow(b)
	if n == len(b) {
		return nil
	}
	// Nothing was pending: the remainder of a partly written input always has a slot.
	return s.enqueue(b[n:], n > 0)
}

// writeNow writes b to the master without waiting for room and records what the
// terminal took. Callers hold s.inMu with nothing pending.
func (s *Session) writeNow(b []byte) int {
	rc, err := s.master.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			w, err := unix.Write(int(fd), b[n:])
			if err == unix.EINTR {
				continue
			}
			if w <= 0 || err != nil {
				break // EAGAIN: the terminal's input buffer is full; the rest is queued
			}
			n += w
		}
		return true // never wait for room here: Input does not block
	})
	if n > 0 {
		_, _ = s.ring.AppendCount(ring.KindInput, n)
	}
	return n
}

// enqueue copies b onto the input queue for the writer, or refuses with queue-full when
// InputQueueDepth writes are already pending. A remainder (the part of a direct write the
// terminal did not take, which must not be refused once its start was written) may use
// the queue's one extra slot. Callers hold s.inMu.
func (s *Session) enqueue(b []byte, remainder bool) error {
	limit := int64(cap(s.inputQ)) - 1
	if remainder {
		limit++
	}
	if s.inPending.Load() >= limit {
		return actuation.Refusef(actuation.CodeQueueFull, "input queue of session %q is full (depth %d)", s.spec.ID, cap(s.inputQ)-1)
	}
	s.inPending.Add(1)
	// inPending counts what the channel holds plus the write in progress, at most its
	// capacity: the send never blocks.
	s.inputQ <- append([]byte(nil), b...)
	return nil
}

// Resize sets the terminal size (TIOCSWINSZ on the master; the kernel sends
// SIGWINCH to the foreground group) and resizes the screen model.
func (s *Session) Resize(rows, cols uint16) error {
	if rows == 0 || cols == 0 || rows > MaxRows || cols > MaxCols {
		return actuation.Refusef(actuation.CodeInvalidSpec, "terminal %dx%d outside 1..%dx1..%d", rows, cols, MaxRows, MaxCols)
	}
	if err := s.accepting(); err != nil {
		return err
	}
	// pty.Setsize would call Fd() and switch the master to blocking mode,
	// after which Close could no longer interrupt the output pump; issue the
	// same ioctl through the poller-safe raw connection instead.
	rc, err := s.master.SyscallConn()
	if err != nil {
		return fmt.Errorf("resize session %q: %w", s.spec.ID, err)
	}
	var ioErr error
	ws := &unix.Winsize{Row: rows, Col: cols}
	if err := rc.Control(func(fd uintptr) { ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) }); err != nil {
		return fmt.Errorf("resize session %q: %w", s.spec.ID, err)
	}
	if ioErr != nil {
		return fmt.Errorf("resize session %q: TIOCSWINSZ: %w", s.spec.ID, ioErr)
	}
	// The resize is an event in the ring: a screen model replaying the ring lays out the
	// output before it at the old size and the output after it at the new one.
	s.screenMu.Lock()
	s.rows, s.cols = rows, cols
	_, _ = s.ring.Append(ring.KindResize, fmt.Appendf(nil, "%dx%d", rows, cols))
	if s.emu != nil {
		s.catchUpLocked()
	}
	s.screenMu.Unlock()
	return nil
}

// Signal delivers sig to the session's process group.
func (s *Session) Signal(sig syscall.Signal) error {
	if !allowedSignals[sig] {
		return actuation.Refusef(actuation.CodeInvalidSpec, "signal %d is not deliverable to sessions", int(sig))
	}
	s.mu.Lock()
	if s.reaped || s.info.Pid == 0 {
		s.mu.Unlock()
		return actuation.Refusef(actuation.CodeSessionNotRunning, "session %q is %s", s.spec.ID, s.Phase())
	}
	err := procexec.SignalGroup(s.info.Pgid, sig)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("signal session %q: %w", s.spec.ID, err)
	}
	_, _ = s.ring.Append(ring.KindSignal, []byte(unix.SignalName(sig)))
	return nil
}

// Close terminates the session (SIGHUP+SIGTERM to the group, SIGKILL after
// the grace period, reap) and waits until cleanup is confirmed or ctx ends.
// It is idempotent: later calls just wait for the same outcome.
func (s *Session) Close(ctx context.Context) error {
	s.terminate(originClose, false, "close requested")
	return s.awaitCleanup(ctx)
}

// Kill terminates the session at once with SIGKILL; it ends Killed.
func (s *Session) Kill(ctx context.Context) error {
	s.terminate(originKill, true, "kill requested")
	return s.awaitCleanup(ctx)
}

// awaitCleanup waits until the session's cleanup is confirmed; cleanup-incomplete when ctx
// ends first.
func (s *Session) awaitCleanup(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return actuation.Refusef(actuation.CodeCleanupIncomplete, "session %q: cleanup not confirmed: %v", s.spec.ID, ctx.Err())
	}
}

type termRequest struct {
	origin    origin
	immediate bool
	reason    string
}

// terminate starts group termination once; the first origin wins. A request
// that arrives before the program started is applied right after it starts.
func (s *Session) terminate(o origin, immediate bool, reason string) {
	s.mu.Lock()
	if s.info.Pid == 0 {
		if s.pending == nil {
			s.pending = &termRequest{o, immediate, reason}
		}
		s.mu.Unlock()
		return
	}
	if s.terminating || s.reaped {
		s.mu.Unlock()
		return
	}
	s.terminating = true
	s.origin = o
	s.mu.Unlock()
	s.setPhase(PhaseClosing, reason)

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reaped {
		return
	}
	if immediate {
		s.signalAllLocked(syscall.SIGKILL)
		return
	}
	// Stopped members must see the TERM: CONT after it.
	s.signalAllLocked(syscall.SIGHUP, syscall.SIGTERM, syscall.SIGCONT)
	s.graceTimer = time.AfterFunc(s.spec.Grace, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.reaped {
			s.signalAllLocked(syscall.SIGKILL)
		}
	})
}

// signalAllLocked signals the session's process group and every other
// process group of its session (job control moves background jobs into their
// own groups), each signal in order to every group, from one scan of the
// session. Callers hold s.mu and have checked !s.reaped, so the unreaped
// leader keeps the ids from being reused.
func (s *Session) signalAllLocked(sigs ...syscall.Signal) {
	pgids := []int{s.info.Pgid}
	members, _ := s.membersLocked()
	for _, m := range members {
		if m.Pgid > 1 && !slices.Contains(pgids, m.Pgid) {
			pgids = append(pgids, m.Pgid)
		}
	}
	for _, sig := range sigs {
		for _, pg := range pgids {
			_ = procexec.SignalGroup(pg, sig)
		}
	}
}

// membersLocked lists the processes of the session's (kernel) session, a scan of /proc,
// except where the kernel already answered: the sandbox's helper is PID 1 of the sandbox's
// own PID namespace and every member of its session lives in that namespace, so once the
// helper has exited, the kernel has killed and reaped every other process of the
// namespace (an exiting namespace init waits for that before its own exit is reported),
// and the session has no member left but the unreaped helper itself, which the group's
// reap covers. Callers hold s.mu.
func (s *Session) membersLocked() ([]procexec.Stat, error) {
	if s.sb != nil && s.leaderDead {
		return nil, nil
	}
	return procexec.SessionMembers(s.info.Sid)
}

// members is membersLocked for callers that do not hold s.mu.
func (s *Session) members() ([]procexec.Stat, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.membersLocked()
}

func (s *Session) sinceStart() int64 { return int64(time.Since(s.start0)) }

func (s *Session) onIdleTimer() {
	idle := s.spec.IdleTimeout
	quiet := time.Duration(s.sinceStart() - s.lastOutput.Load())
	if quiet < idle {
		s.mu.Lock()
		if !s.reaped {
			s.idleTimer.Reset(idle - quiet)
		}
		s.mu.Unlock()
		return
	}
	s.setPhase(PhaseIdle, fmt.Sprintf("no output for %s", idle))
}

// pumpSlab is the largest buffer the output pump reads into, chunk after chunk, handing
// each chunk to the ring without a copy (ring.AppendOwned): one allocation per slab (every
// ~8 full reads), not one per read. Slabs start at one read (4 KiB, what an idle session
// holds, as its read buffer did) and double while output keeps coming. A slab lives while
// the ring retains an event in it; a new slab is started when less than one read is left,
// so the memory output pins stays within the ring's retained bytes plus 1/7 of them and a
// few slabs.
const pumpSlab = 32 << 10

func (s *Session) pumpOutput() {
	defer close(s.pumpDone)
	defer s.m.releaseReader()
	var slab []byte
	size := ring.MaxEventData
	for {
		if cap(slab)-len(slab) < ring.MaxEventData {
			slab = make([]byte, 0, size)
			size = min(2*size, pumpSlab)
		}
		buf := slab[len(slab) : len(slab)+ring.MaxEventData]
		n, err := s.master.Read(buf)
		if n > 0 {
			s.onOutput(buf[:n:n]) // the ring owns these bytes: the next read starts after them
			slab = slab[:len(slab)+n]
		}
		if err != nil {
			s.pumpErr = err
			return
		}
	}
}

func (s *Session) onOutput(b []byte) {
	// The screen model is fed from the ring on demand (Screen, Resize), not here: the PTY
	// read path only appends, so output throughput is bounded by the ring, not the parser.
	_, _ = s.ring.AppendOwned(ring.KindOutput, b)
	s.lastOutput.Store(s.sinceStart())
	if s.Phase() == PhaseIdle && s.setPhase(PhaseRunning, "output") {
		s.mu.Lock()
		if s.idleTimer != nil && !s.reaped {
			s.idleTimer.Reset(s.spec.IdleTimeout)
		}
		s.mu.Unlock()
	}
}

// drainReplies consumes the emulator's answers to terminal queries (device
// attributes, cursor reports). They are discarded: only the operator or an
// explicit input directive may write to the program.
func (s *Session) drainReplies(emu *vt.Emulator) {
	defer close(s.replyDone)
	_, _ = io.Copy(io.Discard, emu)
}

func (s *Session) writeInput() {
	defer close(s.writerDone)
	for {
		select {
		case b := <-s.inputQ:
			n, err := s.master.Write(b)
			if n > 0 {
				_, _ = s.ring.AppendCount(ring.KindInput, n)
			}
			s.inPending.Add(-1) // after the write and its record: see Input
			_ = err             // the master is closing; queued input is dropped with it
		case <-s.stopWriter:
			return
		}
	}
}

// waitLeader runs the end of the session: wait for the leader, terminate what
// is left, reap, verify, release.
func (s *Session) waitLeader() {
	if err := procexec.WaitExitNoReap(s.info.Pid); err != nil {
		s.terminate(originFail, true, err.Error())
	}
	s.mu.Lock()
	s.leaderDead = true
	natural := !s.terminating
	s.mu.Unlock()
	if natural {
		s.terminate(originExit, false, "program exited")
	}
	s.tryCleanup()
}

// tryCleanup reaps the session's groups and verifies that nothing remains. On
// success it finalises the session; otherwise it re-arms a bounded retry
// timer (the kernel offers no notification for a foreign parent reaping).
func (s *Session) tryCleanup() {
	s.cleanupMu.Lock()
	defer s.cleanupMu.Unlock()
	if s.cleaned.Load() {
		return
	}
	var errs []error
	if s.cg != nil && s.cgRep == nil {
		// Whatever is left in the session's cgroup (daemons that left its session
		// and process groups included) is killed as a whole, once.
		rep, err := procexec.KillCgroup(s.cg, s.spec.Resources, s.info.Pgid)
		if s.sb != nil {
			procexec.MergeLeftovers(rep, s.sb) // killed by the end of its PID namespace
		}
		s.mu.Lock()
		s.cgRep = rep
		s.mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		}
	}
	for {
		pgids := []int{s.info.Pgid}
		members, err := s.members()
		if err != nil {
			errs = append(errs, err)
		}
		for _, m := range members {
			if m.Pgid != s.info.Pgid && m.Pgid > 1 {
				pgids = append(pgids, m.Pgid)
			}
		}
		progress := false
		for _, pg := range pgids {
			st, err := procexec.ReapGroup(pg)
			if err != nil {
				errs = append(errs, err)
			}
			s.mu.Lock()
			for pid, ws := range st {
				s.statuses[pid] = ws
				progress = true
			}
			s.mu.Unlock()
		}
		exists, err := procexec.GroupExists(s.info.Pgid)
		if err != nil {
			errs = append(errs, err)
		}
		left, _ := s.members()
		cgLeft := s.cgRep != nil && !s.cgRep.Kill.Empty
		if cgLeft {
			// Retry the cgroup kill with the group re-verification.
			if rep, err := procexec.KillCgroup(s.cg, s.spec.Resources, s.info.Pgid); err == nil {
				s.mu.Lock()
				s.cgRep.Kill.Empty = rep.Kill.Empty
				s.mu.Unlock()
				cgLeft = !rep.Kill.Empty
			}
		}
		if !exists && len(left) == 0 && !cgLeft {
			if s.cgRep != nil && !s.cgRep.Removed {
				// Everything is reaped now, so the group can go.
				s.mu.Lock()
				err := procexec.RemoveCgroup(s.cg, s.cgRep)
				s.mu.Unlock()
				if err != nil {
					s.scheduleRetry(err)
					return
				}
			}
			break
		}
		if !progress {
			s.scheduleRetry(fmt.Errorf("group %d exists=%v, %d session members left: %w",
				s.info.Pgid, exists, len(left), errors.Join(errs...)))
			return
		}
	}
	s.finalize()
}

func (s *Session) scheduleRetry(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanupErr = actuation.Refusef(actuation.CodeCleanupIncomplete, "session %q: %v", s.spec.ID, cause)
	if s.retries >= cleanupRetries {
		return // stays Closing; VerifyCleanup re-probes on demand
	}
	delay := min(cleanupRetryBase<<s.retries, cleanupRetryMax)
	s.retries++
	time.AfterFunc(delay, s.tryCleanup)
}

// VerifyCleanup re-probes a session whose cleanup could not be confirmed and
// reports whether it is now complete.
func (s *Session) VerifyCleanup() bool {
	s.mu.Lock()
	dead := s.leaderDead
	s.mu.Unlock()
	if dead {
		s.tryCleanup()
	}
	return s.CleanupComplete()
}

// CleanupError reports why cleanup is not (yet) confirmed, or nil.
func (s *Session) CleanupError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cleaned.Load() {
		return nil
	}
	return s.cleanupErr
}

// finalize runs once the kernel confirmed the groups gone.
func (s *Session) finalize() {
	s.mu.Lock()
	s.reaped = true
	for _, t := range []*time.Timer{s.graceTimer, s.maxTimer, s.idleTimer} {
		if t != nil {
			t.Stop()
		}
	}
	o := s.origin
	ws, ok := s.statuses[s.info.Pid]
	s.cleanupErr = nil
	s.mu.Unlock()
	s.cleaned.Store(true)

	// Every process is gone, so the pump sees EIO at once unless a process
	// that left the session still holds the terminal: bound the drain.
	_ = s.master.SetReadDeadline(time.Now().Add(OutputDrainTimeout))
	<-s.pumpDone
	// A writer blocked on a full terminal input buffer is released by an
	// immediate write deadline; queued input is dropped with the session.
	_ = s.master.SetWriteDeadline(time.Now())
	close(s.stopWriter)
	<-s.writerDone
	_ = s.master.Close()
	s.screenMu.Lock()
	s.screenClosed = true
	emu := s.emu
	s.screenMu.Unlock()
	if emu != nil {
		if pw, ok := emu.InputPipe().(io.Closer); ok {
			_ = pw.Close() // ends drainReplies; later replies fail instead of blocking
		}
		<-s.replyDone
	}
	_ = s.process.Release()

	ex := Exit{Code: -1, Origin: string(o)}
	switch {
	case ok && s.sb != nil:
		ex.Code, ex.Signal = s.sb.ExitStatus(ws)
	case ok:
		ex.Code, ex.Signal = procexec.ExitDescription(ws)
	}
	if s.sb != nil {
		s.sb.Close()
		_ = os.RemoveAll(s.tmpDir)
	}
	s.exit = ex
	note := fmt.Sprintf("exit=%d", ex.Code)
	if ex.Signal != "" {
		note = "signal=" + ex.Signal
	}
	_, _ = s.ring.Append(ring.KindExit, []byte(note))
	reason := "cleanup confirmed; " + note
	if s.pumpErr != nil && !errors.Is(s.pumpErr, syscall.EIO) && !errors.Is(s.pumpErr, os.ErrDeadlineExceeded) {
		reason += "; output pump: " + s.pumpErr.Error()
	}
	s.setPhase(finalPhase[o], reason)
	s.ring.Close()
	s.m.releaseSlot(s)
	close(s.done)
	s.m.pre.Refill() // a session ended: top the pre-started pool up (prestart.go)
}

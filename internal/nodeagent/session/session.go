package session

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
	var proc *os.Process
	if s.spec.HostRelay {
		cmd := &exec.Cmd{
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
		proc = cmd.Process
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
		proc, s.sb, s.tmpDir = sb.Process, sb, tmp
	}
	pid := proc.Pid
	info := Info{Pid: pid, Pgid: pid, Sid: pid, TTY: tty.Name(), Started: time.Now()}
	// The leader is our unreaped child: its /proc entry exists even if it
	// already exited.
	if st, err := procexec.ProcessStartTime(pid); err == nil {
		info.StartTime = st
	}
	s.start0 = info.Started
	s.master = master
	s.process = proc

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

func (s *Session) sinceStart() int64 { return int64(time.Since(s.start0)) }

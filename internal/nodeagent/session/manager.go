// Package session runs host-brokered PTY sessions for the node agent.
//
// Each session is one program on its own pseudo-terminal, in its own session
// and process group (setsid + controlling tty), with a curated environment
// (the agent's environment is never inherited). Its output feeds a bounded
// event ring (package ring) and a VT screen model that yields bounded viewport
// snapshots. Input goes through a bounded queue; resize and signals are
// explicit operations. The lifecycle is explicit:
//
//	requested -> starting -> running <-> idle -> closing -> closed
//	                  \-> failed                     \-> expired / killed / failed
//
// A Manager enforces the node's caps (sessions per node and per environment,
// reader tasks, input queue depth, event buffer depth) and refuses overload
// with explicit refusal codes instead of queueing. Termination is group-wide
// (SIGHUP+SIGTERM, grace, SIGKILL) and a session only reaches a terminal phase
// once the kernel confirms that no process of it remains; until then it stays
// visibly in Closing and CleanupComplete reports false.
//
// Timers (time.AfterFunc) drive idle detection, max duration and grace; no
// code path polls with sleeps. No Kubernetes types are used here.
package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// Defaults (resolved decision 14: the laptop profile is 2 sessions, 4 reader
// tasks, input queue depth 256, event buffer depth 1,000) and ceilings. Each
// cap names the refusal it produces.
const (
	// DefaultSessions: active sessions per node (refusal.SessionCapReached).
	DefaultSessions = 2
	// DefaultSessionsPerEnvironment: active sessions per environment
	// (refusal.SessionCapReached).
	DefaultSessionsPerEnvironment = 2
	// DefaultReaderTasks: reader-task permits shared by PTY output pumps (one
	// per session) and event long-polls (refusal.ReaderCapReached).
	DefaultReaderTasks = 4
	// DefaultInputQueueDepth: queued input writes per session (refusal.QueueFull).
	DefaultInputQueueDepth = 256
	// DefaultEventBufferDepth: events retained per session; a Spec asking for
	// more is refused (refusal.EventBufferFull).
	DefaultEventBufferDepth = ring.DefaultMaxEvents
	// DefaultEventMaxAge: event retention window per session.
	DefaultEventMaxAge = ring.DefaultMaxAge
	// DefaultEventBufferBytes: retained output bytes per session.
	DefaultEventBufferBytes = ring.DefaultMaxBytes
	// DefaultMaxInputBytes: bytes accepted by one Input call (refusal.InputTooLarge).
	DefaultMaxInputBytes = 4 << 10
	// DefaultMaxDuration applies when Spec.MaxDuration is zero.
	DefaultMaxDuration = time.Hour
	// DefaultMaxDurationCeiling caps Spec.MaxDuration and Spec.IdleTimeout
	// (refusal.TimeoutAboveMax): the node ceiling admission enforces too
	// (actuation.MaxSessionDurationSeconds).
	DefaultMaxDurationCeiling = actuation.MaxSessionDurationSeconds * time.Second
	// DefaultIdleTimeout applies when Spec.IdleTimeout is zero (a negative
	// value disables idle detection). Idle is a phase, never a kill trigger.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultGrace is the SIGTERM -> SIGKILL grace period; MaxGrace caps it
	// (refusal.TimeoutAboveMax).
	DefaultGrace = 2 * time.Second
	MaxGrace     = 30 * time.Second
	// DefaultRows/DefaultCols size a terminal when the Spec leaves them 0;
	// MaxRows/MaxCols bound Open and Resize (refusal.InvalidSpec).
	DefaultRows = 24
	DefaultCols = 80
	MaxRows     = 500
	MaxCols     = 1000
	// OutputDrainTimeout bounds how long PTY output is drained once the
	// process group is gone (a process that escaped the session may hold the
	// terminal open).
	OutputDrainTimeout = time.Second
	// cleanupRetries bounds the timer-driven re-verification of a group that
	// could not be confirmed gone (e.g. orphans reaped by a foreign PID 1);
	// the delay doubles from cleanupRetryBase up to cleanupRetryMax.
	cleanupRetries   = 10
	cleanupRetryBase = 50 * time.Millisecond
	cleanupRetryMax  = 5 * time.Second
	// historyCap bounds the retained phase history per session.
	historyCap = 64
)

// Caps are the node's session caps. Zero fields select the defaults.
type Caps struct {
	Sessions               int
	SessionsPerEnvironment int
	ReaderTasks            int
	InputQueueDepth        int
	EventBufferDepth       int
	EventMaxAge            time.Duration
	EventBufferBytes       int
	MaxInputBytes          int
	MaxDuration            time.Duration // ceiling for Spec.MaxDuration / IdleTimeout
	// PrestartedSessions is how many sandbox helpers are kept started ahead on PTYs of
	// their own for sandboxed sessions (prestart.go); 0 selects
	// DefaultPrestartedSessions, a negative value keeps none. At most
	// MaxPrestartedSessions.
	PrestartedSessions int
}

// DefaultCaps returns the laptop-profile caps.
func DefaultCaps() Caps {
	return Caps{}.withDefaults()
}

func (c Caps) withDefaults() Caps {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Sessions, DefaultSessions)
	def(&c.SessionsPerEnvironment, DefaultSessionsPerEnvironment)
	def(&c.ReaderTasks, DefaultReaderTasks)
	def(&c.InputQueueDepth, DefaultInputQueueDepth)
	def(&c.EventBufferDepth, DefaultEventBufferDepth)
	def(&c.EventBufferBytes, DefaultEventBufferBytes)
	def(&c.MaxInputBytes, DefaultMaxInputBytes)
	if c.EventMaxAge <= 0 {
		c.EventMaxAge = DefaultEventMaxAge
	}
	if c.PrestartedSessions == 0 {
		c.PrestartedSessions = DefaultPrestartedSessions
	}
	c.PrestartedSessions = min(c.PrestartedSessions, MaxPrestartedSessions) // negative: off
	if c.MaxDuration <= 0 || c.MaxDuration > DefaultMaxDurationCeiling {
		c.MaxDuration = DefaultMaxDurationCeiling // never above the ceiling admission enforces
	}
	return c
}

// Phase is a session lifecycle phase.
type Phase string

// Lifecycle phases.
const (
	PhaseRequested Phase = "requested"
	PhaseStarting  Phase = "starting"
	PhaseRunning   Phase = "running"
	PhaseIdle      Phase = "idle"
	PhaseClosing   Phase = "closing"
	PhaseClosed    Phase = "closed"
	PhaseFailed    Phase = "failed"
	PhaseExpired   Phase = "expired"
	PhaseKilled    Phase = "killed"
)

// Terminal reports whether p is final.
func (p Phase) Terminal() bool {
	switch p {
	case PhaseClosed, PhaseFailed, PhaseExpired, PhaseKilled:
		return true
	}
	return false
}

var transitions = map[Phase][]Phase{
	"":             {PhaseRequested},
	PhaseRequested: {PhaseStarting, PhaseFailed},
	PhaseStarting:  {PhaseRunning, PhaseFailed},
	PhaseRunning:   {PhaseIdle, PhaseClosing},
	PhaseIdle:      {PhaseRunning, PhaseClosing},
	PhaseClosing:   {PhaseClosed, PhaseExpired, PhaseKilled, PhaseFailed},
}

// PhaseChange is reported to the observer for every transition.
type PhaseChange struct {
	SessionID     string
	EnvironmentID string
	From, To      Phase
	Reason        string
	Time          time.Time
	Seq           uint64 // seq of the "status" event recorded in the ring
}

// Option configures a Manager.
type Option func(*Manager)

// WithObserver registers a callback invoked synchronously, in order, for each
// phase change of every session. It must not block and must not call Close,
// Kill, Signal or Open (it runs on the session's internal goroutines).
func WithObserver(fn func(PhaseChange)) Option {
	return func(m *Manager) { m.observer = fn }
}

// Sandbox configures how session programs are sandboxed (procexec.StartSandboxed).
type Sandbox struct {
	// HelperPath is the sandbox helper binary (empty: the running executable).
	HelperPath string
	// TempBase holds the sessions' private temp dirs (empty: os.TempDir()).
	TempBase string
	// UID is the host uid of the sandbox's root (0: procexec.DefaultSandboxUID).
	UID uint32
	// TempBytes bounds each session's /tmp, a tmpfs (0: procexec.DefaultTempBytes).
	TempBytes int64
}

// WithSandbox sets the sandbox configuration of session programs.
func WithSandbox(sb Sandbox) Option {
	return func(m *Manager) { m.sandbox = sb }
}

// WithCgroups gives every session a cgroup of its own (cgroups.KindSession) with
// Spec.Resources (procexec.ResolveLimits defaults); a missing controller refuses the
// session with cgroup-unavailable. Teardown kills the whole cgroup.
func WithCgroups(cg *cgroups.Manager) Option {
	return func(m *Manager) { m.cgroups = cg }
}

// Manager owns the node's sessions and enforces Caps.
type Manager struct {
	caps     Caps
	observer func(PhaseChange)
	sandbox  Sandbox
	cgroups  *cgroups.Manager

	mu       sync.Mutex
	sessions map[string]*Session
	perEnv   map[string]int
	readers  int
	shutdown bool

	pre *procexec.Pool[*preTerm] // pre-started session sandboxes (prestart.go); nil when off
	// starting counts session starts in progress: the pool refills only while it is 0.
	starting atomic.Int32
	preTaken atomic.Uint64 // sessions opened on a pre-started helper
}

// NewManager returns a Manager enforcing caps (zero fields -> defaults).
func NewManager(caps Caps, opts ...Option) *Manager {
	m := &Manager{
		caps:     caps.withDefaults(),
		sessions: map[string]*Session{},
		perEnv:   map[string]int{},
	}
	for _, o := range opts {
		o(m)
	}
	if m.sandbox.TempBase == "" {
		m.sandbox.TempBase = os.TempDir()
	}
	if m.sandbox.HelperPath != "" && !filepath.IsAbs(m.sandbox.HelperPath) {
		m.sandbox.HelperPath = "" // never resolve a helper through PATH or the cwd
	}
	m.pre = m.newPrestartPool()
	return m
}

// Caps returns the effective caps.
func (m *Manager) Caps() Caps { return m.caps }

// Get returns an active (not yet cleaned-up) session.
func (m *Manager) Get(id string) (*Session, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	return s, ok
}

// Active returns the number of sessions holding a slot.
func (m *Manager) Active() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// Readers returns the reader-task permits in use.
func (m *Manager) Readers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.readers
}

// Open admits and starts a session. It returns once the program runs (phase
// Running) or with a refusal / error (the session then ended Failed).
func (m *Manager) Open(ctx context.Context, spec Spec) (*Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, actuation.Refusef(actuation.CodeInterrupted, "open session: %v", err)
	}
	if err := m.normalize(&spec); err != nil {
		return nil, err
	}
	s, err := m.admit(spec)
	if err != nil {
		return nil, err
	}
	s.setPhase(PhaseRequested, "admitted")
	s.setPhase(PhaseStarting, "spawning")
	m.starting.Add(1)
	err = s.start()
	m.starting.Add(-1)
	m.refillAfterStart()
	if err != nil {
		s.setPhase(PhaseFailed, err.Error())
		s.ring.Close()
		m.releaseReader()
		m.releaseSlot(s)
		close(s.done)
		return nil, fmt.Errorf("open session %q: %w", spec.ID, err)
	}
	return s, nil
}

func (m *Manager) admit(spec Spec) (*Session, error) {
	rg, err := ring.New(ring.Config{
		MaxEvents: spec.EventBufferDepth,
		MaxAge:    m.caps.EventMaxAge,
		MaxBytes:  m.caps.EventBufferBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("open session %q: event ring: %w", spec.ID, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.shutdown:
		return nil, actuation.Refusef(actuation.CodeInterrupted, "session manager is shutting down")
	case m.sessions[spec.ID] != nil:
		return nil, actuation.Refusef(actuation.CodeSessionExists, "session %q already exists", spec.ID)
	case len(m.sessions) >= m.caps.Sessions:
		return nil, actuation.Refusef(actuation.CodeSessionCapReached, "node session cap %d reached", m.caps.Sessions)
	case m.perEnv[spec.EnvironmentID] >= m.caps.SessionsPerEnvironment:
		return nil, actuation.Refusef(actuation.CodeSessionCapReached, "per-environment session cap %d reached for %q",
			m.caps.SessionsPerEnvironment, spec.EnvironmentID)
	case m.readers >= m.caps.ReaderTasks:
		return nil, actuation.Refusef(actuation.CodeReaderCapReached, "all %d reader tasks are in use", m.caps.ReaderTasks)
	}
	s := newSession(m, spec, rg)
	m.sessions[spec.ID] = s
	m.perEnv[spec.EnvironmentID]++
	m.readers++ // the output pump's permit
	return s, nil
}

func (m *Manager) acquireReader() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.readers >= m.caps.ReaderTasks {
		return actuation.Refusef(actuation.CodeReaderCapReached, "all %d reader tasks are in use", m.caps.ReaderTasks)
	}
	m.readers++
	return nil
}

func (m *Manager) releaseReader() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.readers--
}

func (m *Manager) releaseSlot(s *Session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sessions[s.spec.ID] != s {
		return
	}
	delete(m.sessions, s.spec.ID)
	if m.perEnv[s.spec.EnvironmentID]--; m.perEnv[s.spec.EnvironmentID] <= 0 {
		delete(m.perEnv, s.spec.EnvironmentID)
	}
}

// Shutdown refuses new sessions and closes every active one, waiting until
// they are cleaned up or ctx ends.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.shutdown = true
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	m.pre.Close()
	errs := make(chan error, len(all))
	for _, s := range all {
		go func() { errs <- s.Close(ctx) }()
	}
	var out []error
	for range all {
		if err := <-errs; err != nil {
			out = append(out, err)
		}
	}
	return errors.Join(out...)
}

func (m *Manager) normalize(s *Spec) error {
	if s.ID == "" || len(s.ID) > 253 {
		return actuation.Refusef(actuation.CodeInvalidSpec, "session ID must be 1..253 bytes")
	}
	if err := procexec.ValidateArgv(s.Argv); err != nil {
		return err
	}
	if err := procexec.ValidateEnv(s.Env); err != nil {
		return err
	}
	if s.Env == nil {
		s.Env = []string{} // never nil: exec would inherit the agent's environment
	}
	if s.Dir == "" {
		s.Dir = "/"
	}
	if err := procexec.ValidateDir(s.Dir); err != nil {
		return err
	}
	if err := procexec.ValidateRoots(s.WritableRoots, s.ReadableRoots); err != nil {
		return err
	}
	if s.Rows == 0 {
		s.Rows = DefaultRows
	}
	if s.Cols == 0 {
		s.Cols = DefaultCols
	}
	if s.Rows > MaxRows || s.Cols > MaxCols {
		return actuation.Refusef(actuation.CodeInvalidSpec, "terminal %dx%d exceeds %dx%d", s.Rows, s.Cols, MaxRows, MaxCols)
	}
	switch {
	case s.MaxDuration < 0 || s.Grace < 0 || s.EventBufferDepth < 0:
		return actuation.Refusef(actuation.CodeInvalidSpec, "negative max duration, grace or event buffer depth")
	case s.MaxDuration > m.caps.MaxDuration:
		return actuation.Refusef(actuation.CodeTimeoutAboveMax, "max duration %s exceeds %s", s.MaxDuration, m.caps.MaxDuration)
	case s.IdleTimeout > m.caps.MaxDuration:
		return actuation.Refusef(actuation.CodeTimeoutAboveMax, "idle timeout %s exceeds %s", s.IdleTimeout, m.caps.MaxDuration)
	case s.Grace > MaxGrace:
		return actuation.Refusef(actuation.CodeTimeoutAboveMax, "grace %s exceeds %s", s.Grace, MaxGrace)
	case s.EventBufferDepth > m.caps.EventBufferDepth:
		return actuation.Refusef(actuation.CodeEventBufferFull, "event buffer depth %d exceeds the node cap %d",
			s.EventBufferDepth, m.caps.EventBufferDepth)
	}
	if s.MaxDuration == 0 {
		s.MaxDuration = min(DefaultMaxDuration, m.caps.MaxDuration)
	}
	if s.IdleTimeout == 0 {
		s.IdleTimeout = DefaultIdleTimeout
	}
	if s.Grace == 0 {
		s.Grace = DefaultGrace
	}
	if s.EventBufferDepth == 0 {
		s.EventBufferDepth = m.caps.EventBufferDepth
	}
	return nil
}

// allowedSignals are the signals Signal may deliver.
var allowedSignals = map[syscall.Signal]bool{
	syscall.SIGINT: true, syscall.SIGTERM: true, syscall.SIGHUP: true, syscall.SIGKILL: true,
	syscall.SIGQUIT: true, syscall.SIGTSTP: true, syscall.SIGCONT: true, syscall.SIGWINCH: true,
	syscall.SIGUSR1: true, syscall.SIGUSR2: true,
}

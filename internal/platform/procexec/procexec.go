// Package procexec runs structured commands for the node agent.
//
// A command is data: an absolute executable, an argv, a curated environment
// (never the agent's own), a working directory and limits. Each command runs in
// its own process group, in a fresh network namespace with only loopback up,
// with writes confined by Landlock to declared roots plus a private temp dir
// that is created per run and removed afterwards, and with no_new_privs set.
// Isolation is established by a re-exec helper (see MaybeRunHelper) and fails
// closed with an explicit refusal when it cannot be established.
//
// Termination is group-wide and attributed: a timeout, a context cancellation
// or an explicit Kill sends SIGTERM to the group, then SIGKILL after the grace
// period; the Result records which of them ended the command. When the main
// process exits, whatever is left of its group is killed and reaped so nothing
// outlives the command, and the Result reports whether the kernel confirmed the
// group gone.
//
// No Kubernetes types are used here.
package procexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/platform/procexec/sandboxhelper"
)

// Caps and defaults. Each cap names the refusal code it produces.
const (
	// DefaultTimeout applies when Spec.Timeout is zero.
	DefaultTimeout = 10 * time.Minute
	// MaxTimeout caps Spec.Timeout (refusal.TimeoutAboveMax): the node ceiling
	// admission enforces too (actuation.MaxCommandTimeoutSeconds).
	MaxTimeout = actuation.MaxCommandTimeoutSeconds * time.Second
	// DefaultGrace is the SIGTERM→SIGKILL grace period.
	DefaultGrace = 2 * time.Second
	// MaxGrace caps Spec.Grace (refusal.TimeoutAboveMax).
	MaxGrace = 30 * time.Second
	// DefaultOutputBytes is the shared stdout+stderr cap when unset.
	DefaultOutputBytes = 1 << 20
	// MaxOutputBytes caps Spec.OutputBytes (refusal.OutputCapAboveMax): the node
	// ceiling admission enforces too (actuation.MaxCommandOutputBytes).
	MaxOutputBytes = actuation.MaxCommandOutputBytes
	// MaxArgs and MaxArgBytes bound the argv (refusal.InvalidSpec): the core's table
	// (actuation/bounds.go), so what admission accepts is what the runner runs.
	MaxArgs     = actuation.MaxArgv
	MaxArgBytes = actuation.MaxArgvWireBytes
	// MaxEnvVars and MaxEnvBytes bound the curated environment (refusal.InvalidSpec).
	MaxEnvVars  = actuation.MaxProcessEnvVars
	MaxEnvBytes = actuation.MaxProcessEnvBytes
	// MaxRoots bounds WritableRoots and ReadableRoots each (refusal.InvalidSpec).
	MaxRoots = sandboxhelper.MaxRoots
	// DefaultMaxConcurrent is the default concurrent command cap
	// (refusal.CommandCapReached).
	DefaultMaxConcurrent = 4
	// HelperDeadlineMargin is how long after a command's deadline and grace its sandbox's
	// PID 1 kills the command itself (SandboxSpec.KillAfter): only when this process, which
	// kills at the deadline, is gone.
	HelperDeadlineMargin = 5 * time.Second
	// HelperStartTimeout bounds the sandbox set-up handshake.
	HelperStartTimeout = 10 * time.Second
	// OutputDrainTimeout bounds how long output is drained after the group is
	// gone (a process that escaped the group may still hold the pipe).
	OutputDrainTimeout = time.Second
	// outputChunk is the read size of the output pump.
	outputChunk = 32 << 10
)

// Network selects the network mode. Only NetworkNone exists: a fresh network
// namespace with loopback only. Anything else is refused (egress-forbidden).
type Network string

// NetworkNone is the only supported (and the default) network mode.
const NetworkNone Network = "none"

// Origin records what ended a command.
type Origin string

// Termination origins.
const (
	OriginExit     Origin = "exit"     // the program ended on its own
	OriginTimeout  Origin = "timeout"  // Spec.Timeout elapsed
	OriginCancel   Origin = "cancel"   // the Start/Run context was cancelled
	OriginOperator Origin = "operator" // Handle.Kill by an operator directive
)

// Spec describes one command. Argv is data: Argv[0] must be an absolute path
// and no shell or PATH lookup is involved.
type Spec struct {
	Argv []string
	// Env is the complete environment of the program ("K=V"); nil means an
	// empty environment. The agent's environment is never inherited.
	Env []string
	// Dir is the working directory (absolute, must exist). Empty selects the
	// private temp dir.
	Dir string
	// Timeout (default DefaultTimeout, max MaxTimeout) and Grace (default
	// DefaultGrace, max MaxGrace).
	Timeout time.Duration
	Grace   time.Duration
	// OutputBytes is ONE cap shared by stdout and stderr (combined in arrival
	// order). 0 selects DefaultOutputBytes; max MaxOutputBytes.
	OutputBytes int64
	// Network must be "" or "none".
	Network Network
	// WritableRoots are absolute existing directories where writes are
	// allowed, in addition to the private temp dir.
	WritableRoots []string
	// ReadableRoots are mounted read-only. Nothing else of the host is
	// visible but a small read-only system set (/usr, /bin, /lib*, a few /etc
	// files), Argv[0] and Dir.
	ReadableRoots []string
	// TempDirEnv, when set (e.g. "TMPDIR"), adds NAME=/tmp (where the
	// sandbox sees its private temp dir) to the environment. By default the environment is exactly Env.
	TempDirEnv string
	// OnOutput, when set, receives each piece of retained output (never beyond
	// OutputBytes) as it is read, on the output pump's goroutine; the slice is
	// reused afterwards, so OnOutput copies what it keeps. The last call
	// happens before Done is closed.
	OnOutput func([]byte)
	// Resources are the command's cgroup limits (zero fields select the command
	// defaults, see ResolveLimits) and CgroupID names its group (default: random).
	// Used when the Runner has a cgroup manager.
	Resources cgroups.Limits
	CgroupID  string
	// StderrBytes, when > 0, gives stderr a pipe of its own with this cap
	// (max MaxOutputBytes): Output then holds stdout only (capped by
	// OutputBytes) and Result.Stderr the standard error. OnOutput sees stdout
	// only.
	StderrBytes int64
	// Mounts and FileSizeLimit: see SandboxSpec.
	Mounts        []Mount
	FileSizeLimit int64
	// GitMetadataWritable: see SandboxSpec.
	GitMetadataWritable bool
	// OnSandbox, when set, runs once the sandbox's namespaces exist and
	// before its program is configured (nothing runs in it yet), with the
	// helper's pid: e.g. to attach an egress proxy's listeners inside its
	// network namespace. An error aborts the start.
	OnSandbox func(pid int) error
	// BeforeExec, when set, runs once the sandbox is set up (namespaces, cgroup, root,
	// capabilities, Landlock, seccomp) right before its program is exec'd: the program
	// runs only if it returns nil; an error aborts the start and Start returns it. The
	// node agent makes its durable start record and its claim here, overlapping the
	// sandbox's set-up, so no program ever runs without them.
	BeforeExec func() error
	// Trace, when set, is called with the name of each start and teardown step as it
	// completes (benchmarks' span breakdown, internal/platform/spans). It must not block.
	Trace func(step string)
	// Slot, when set, is a concurrency slot the caller reserved (Runner.Reserve): Start
	// uses it instead of taking one, so it never refuses at the cap.
	Slot *Slot
}

// Info identifies a started command (for status and crash recovery).
type Info struct {
	Pid  int
	Pgid int
	// StartTime is /proc/<pid>/stat field 22 (clock ticks since boot).
	StartTime uint64
	TempDir   string
}

// Result is the outcome of a command.
type Result struct {
	ExitCode        int    // -1 when killed by a signal
	Signal          string // e.g. "SIGKILL"; empty when the program exited
	SignalOrigin    Origin // what ended the command
	Output          []byte // combined stdout+stderr, at most the cap
	OutputBytesSeen int64  // total bytes produced, including discarded ones
	Truncated       bool
	Pid             int
	Pgid            int
	StartTime       uint64
	Duration        time.Duration
	// Stderr, StderrBytesSeen and StderrTruncated: standard error when
	// Spec.StderrBytes is set (Output is then stdout alone).
	Stderr          []byte
	StderrBytesSeen int64
	StderrTruncated bool
	// CleanupComplete is true when kill(-pgid, 0) returned ESRCH after the
	// group was reaped, the output pipe reached EOF, the temp dir was removed
	// and (with a cgroup manager) the command's cgroup was confirmed empty and removed.
	CleanupComplete bool
	// Cgroup reports the command's cgroup (nil without a cgroup manager).
	Cgroup *CgroupReport
}

// Limits configures a Runner.
type Limits struct {
	// MaxConcurrent caps concurrently running commands (refusal
	// command-cap-reached). 0 selects DefaultMaxConcurrent.
	MaxConcurrent int
	// TempBase is where private temp dirs are created (default os.TempDir()).
	TempBase string
	// TempBytes bounds every sandbox's /tmp, a tmpfs of its own (0: DefaultTempBytes).
	TempBytes int64
	// SandboxUID is the host uid of the sandboxes' root (0 selects
	// DefaultSandboxUID).
	SandboxUID uint32
	// BeforeConfig, when set, runs for each helper after it is started and
	// before it is configured (see StartOptions.BeforeConfig).
	BeforeConfig func(pid int) error
	// HelperPath is the sandbox helper binary: any binary whose main() calls
	// MaybeRunHelper first. Default: the running executable (os.Executable).
	// A small dedicated binary avoids paying the agent's package
	// initialisation on every command.
	HelperPath string
	// Cgroups, when set, gives every command a cgroup of its own (KindCommand) with
	// Spec.Resources; a missing controller refuses with cgroup-unavailable. The node
	// agent always sets it; nil runs commands without a cgroup.
	Cgroups *cgroups.Manager
	// PrestartedSandboxes is how many sandbox helpers the runner keeps started ahead
	// (namespaces, cgroup and output pipe ready, waiting for a command: prestart.go).
	// 0 starts every helper on demand.
	PrestartedSandboxes int
	// RefillByCaller: the pool is refilled when the caller calls Refill (e.g. once it has
	// recorded a command's outcome), not as each command's teardown ends.
	RefillByCaller bool
}

// Runner admits and starts commands under Limits.
type Runner struct {
	limits Limits
	sem    chan struct{}
	pool   *Pool[*pooledSandbox] // nil without pre-started sandboxes
	// starting counts Start calls in progress: the pool refills only while it is 0.
	starting atomic.Int32
}

// NewRunner returns a Runner with the given limits.
func NewRunner(l Limits) *Runner {
	if l.MaxConcurrent <= 0 {
		l.MaxConcurrent = DefaultMaxConcurrent
	}
	if l.TempBase == "" {
		l.TempBase = os.TempDir()
	}
	if l.HelperPath != "" && !filepath.IsAbs(l.HelperPath) {
		l.HelperPath = "" // never resolve a helper through PATH or the cwd
	}
	r := &Runner{limits: l, sem: make(chan struct{}, l.MaxConcurrent)}
	r.pool = r.newSandboxPool(l.PrestartedSandboxes)
	return r
}

var defaultRunner = NewRunner(Limits{})

// Start starts spec on the default runner.
func Start(ctx context.Context, spec Spec) (*Handle, error) { return defaultRunner.Start(ctx, spec) }

// Running returns the number of commands holding a concurrency slot.
func (r *Runner) Running() int { return len(r.sem) }

// Reserve takes one of the runner's concurrency slots for a Start to come (Spec.Slot), or
// reports that none is free: a caller that would rather wait for a slot than be refused
// at the cap (command-cap-reached) reserves first. Release gives back a slot no Start used.
func (r *Runner) Reserve() (*Slot, bool) {
	select {
	case r.sem <- struct{}{}:
		return &Slot{r: r}, true
	default:
		return nil, false
	}
}

// Slot is one reserved concurrency slot of a Runner (Reserve).
type Slot struct {
	r    *Runner
	used atomic.Bool
}

// Release returns the slot to its runner if no Start took it, and reports whether it did;
// after a Start took it, it does nothing (the slot is released when that command ends).
func (s *Slot) Release() bool {
	if s == nil || !s.used.CompareAndSwap(false, true) {
		return false
	}
	<-s.r.sem
	return true
}

// take hands the slot to a Start on r: false when there is none to take (nil, used, or
// reserved on another runner).
func (s *Slot) take(r *Runner) bool {
	return s != nil && s.r == r && s.used.CompareAndSwap(false, true)
}

// Run runs spec on the default runner and waits for it.
func Run(ctx context.Context, spec Spec) (Result, error) { return defaultRunner.Run(ctx, spec) }

// Run starts spec and waits for its Result.
func (r *Runner) Run(ctx context.Context, spec Spec) (Result, error) {
	h, err := r.Start(ctx, spec)
	if err != nil {
		return Result{}, err
	}
	return h.Wait()
}

// Handle is a running command.
type Handle struct {
	spec    Spec
	info    Info
	proc    *os.Process
	sb      *Sandboxed
	started time.Time
	release func()
	cgroup  *cgroups.Group

	outR    *os.File
	outDone chan struct{}
	outErr  error // terminal read error of the output pump (io.EOF when drained)
	errPump *pump // separate stderr (Spec.StderrBytes), or nil
	output  []byte
	seen    int64

	stopCtx func() bool
	timeout *time.Timer

	mu          sync.Mutex
	origin      Origin
	terminating bool
	exited      bool
	reaped      bool
	grace       *time.Timer

	done   chan struct{}
	result Result
	err    error
}

// Start validates and admits spec, starts it inside the sandbox and returns
// once the program has been exec'd (or the sandbox refused). Refusals are
// *actuation.Refusal values.
func (r *Runner) Start(ctx context.Context, spec Spec) (*Handle, error) {
	if err := ctx.Err(); err != nil {
		return nil, actuation.Refusef(actuation.CodeInterrupted, "start: %v", err)
	}
	if err := normalize(&spec); err != nil {
		return nil, err
	}
	self := r.limits.HelperPath
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("procexec: locate agent executable for the sandbox helper: %w", err)
		}
	}

	if !spec.Slot.take(r) {
		select {
		case r.sem <- struct{}{}:
		default:
			return nil, actuation.Refusef(actuation.CodeCommandCapReached, "%d commands already running", cap(r.sem))
		}
	}
	r.starting.Add(1)
	startEnded := false
	endStart := func() {
		if !startEnded {
			startEnded = true
			r.starting.Add(-1)
		}
	}
	defer endStart()
	released := false
	release := func() {
		if !released {
			released = true
			<-r.sem
		}
	}

	trace := spec.Trace
	if trace == nil {
		trace = func(string) {}
	}
	tmp, err := os.MkdirTemp(r.limits.TempBase, "procexec-")
	if err != nil {
		release()
		return nil, fmt.Errorf("procexec: create private temp dir: %w", err)
	}
	cleanupTmp := func() { _ = os.RemoveAll(tmp) }
	env := spec.Env
	if spec.TempDirEnv != "" {
		env = append(append([]string{}, env...), spec.TempDirEnv+"="+SandboxTmp)
	}
	sbSpec := SandboxSpec{
		Argv:          spec.Argv,
		Env:           env,
		Dir:           spec.Dir,
		WritableRoots: spec.WritableRoots,
		ReadableRoots: spec.ReadableRoots,
		TempDir:       tmp,
		Mounts:        spec.Mounts,
		FileSizeLimit: spec.FileSizeLimit,
		// The sandbox's own backstop: the command's deadline and grace plus a margin, so
		// it never fires while this process enforces the deadline itself.
		KillAfter:           spec.Timeout + spec.Grace + HelperDeadlineMargin,
		GitMetadataWritable: spec.GitMetadataWritable,
		TempBytes:           r.limits.TempBytes,
	}
	var g *cgroups.Group
	var ps *pooledSandbox
	if r.pool != nil && spec.StderrBytes == 0 { // a pre-started helper has one output pipe
		ps = r.takePrestarted(ResolveLimits(spec.Resources))
	}
	if ps != nil {
		trace("sandbox-prestarted-taken")
		g = ps.cgroup
		if g != nil {
			spec.Resources = ResolveLimits(spec.Resources)
		}
	} else if r.limits.Cgroups != nil {
		if g, err = CreateCgroup(r.limits.Cgroups, cgroups.KindCommand, CgroupID(spec.CgroupID), spec.Resources); err != nil {
			cleanupTmp()
			release()
			return nil, err
		}
		spec.Resources = ResolveLimits(spec.Resources)
		trace("sandbox-cgroup-created")
	}
	h, err := r.spawn(ctx, self, spec, sbSpec, g, ps)
	if err != nil {
		if g != nil {
			_, _ = g.Kill()
			_ = g.Delete()
		}
		cleanupTmp()
		release()
		return nil, err
	}
	h.info.TempDir = tmp
	trace("sandbox-program-started")
	h.release = func() {
		cleanupTmp()
		release()
		// Refill once the command has ended, and only while no start is in progress
		// (fillPool): a helper's start (and on cgroup v1 its migration, which stalls every
		// fork on the node while it runs) then competes with neither this command, its
		// teardown, nor another command's start. With Limits.RefillByCaller the caller
		// refills (Refill) once it is done with the command's outcome too.
		if !r.limits.RefillByCaller {
			r.pool.Refill()
		}
	}
	// The start ends before the wait loop begins: a command that exits at once must find
	// the pool idle when its release refills it (a refill while starting > 0 is skipped).
	endStart()
	go h.waitLoop()
	return h, nil
}

func (r *Runner) spawn(ctx context.Context, self string, spec Spec, sbSpec SandboxSpec, g *cgroups.Group, ps *pooledSandbox) (*Handle, error) {
	var sb *Sandboxed
	var outR *os.File
	var err error
	// Hooks run once the helper is in its namespaces and group, before it is configured.
	hooks := func(pid int) error {
		if spec.Trace != nil {
			spec.Trace("sandbox-helper-in-cgroup")
		}
		if r.limits.BeforeConfig != nil {
			if err := r.limits.BeforeConfig(pid); err != nil {
				return err
			}
		}
		if spec.OnSandbox != nil {
			return spec.OnSandbox(pid)
		}
		return nil
	}
	var beforeExec func() error
	if spec.BeforeExec != nil {
		beforeExec = func() error {
			if spec.Trace != nil {
				spec.Trace("sandbox-ready")
			}
			return spec.BeforeExec()
		}
	}
	if ps != nil {
		// A pre-started helper: already in its namespaces and (with cgroups) its group,
		// which now enforces this command's limits; its output pipe is the command's.
		outR = ps.outR
		cfg, idmaps, perr := prepareSandbox(sbSpec)
		if perr != nil {
			ps.hp.discard()
			_ = outR.Close()
			return nil, perr
		}
		if sb, err = ps.hp.configure(cfg, idmaps, hooks, beforeExec); err != nil {
			_ = outR.Close()
			return nil, err
		}
		return r.handle(ctx, spec, sb, g, outR, nil), nil
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("procexec: output pipe: %w", err)
	}
	errW := outW // the same *os.File for both: one pipe, arrival order
	var errP *pump
	if spec.StderrBytes > 0 {
		er, ew, err := os.Pipe()
		if err != nil {
			_ = outR.Close()
			_ = outW.Close()
			return nil, fmt.Errorf("procexec: stderr pipe: %w", err)
		}
		errW, errP = ew, &pump{r: er, limit: spec.StderrBytes, done: make(chan struct{})}
	}
	// Into the cgroup before the helper is configured: it does nothing before.
	before := func(pid int) error {
		if spec.Trace != nil {
			spec.Trace("sandbox-helper-cloned")
		}
		if g != nil {
			if err := EnterCgroup(g, pid); err != nil {
				return err
			}
		}
		return hooks(pid)
	}
	sb, err = StartSandboxed(sbSpec, StartOptions{
		HelperPath:   self,
		UID:          r.limits.SandboxUID,
		Stdout:       outW,
		Stderr:       errW,
		BeforeConfig: before,
		BeforeExec:   beforeExec,
	})
	_ = outW.Close()
	if errP != nil {
		_ = errW.Close()
	}
	if err != nil {
		_ = outR.Close()
		if errP != nil {
			_ = errP.r.Close()
		}
		return nil, err
	}
	return r.handle(ctx, spec, sb, g, outR, errP), nil
}

// handle wraps a started sandbox: output pump, timeout, cancellation.
func (r *Runner) handle(ctx context.Context, spec Spec, sb *Sandboxed, g *cgroups.Group, outR *os.File, errP *pump) *Handle {
	pid := sb.Pid
	h := &Handle{
		spec:    spec,
		proc:    sb.Process,
		sb:      sb,
		cgroup:  g,
		started: time.Now(),
		outR:    outR,
		outDone: make(chan struct{}),
		errPump: errP,
		done:    make(chan struct{}),
		info:    Info{Pid: pid, Pgid: pid},
	}
	// The leader is our unreaped child, so /proc/<pid>/stat exists even if
	// it already exited.
	if st, err := ProcessStartTime(pid); err == nil {
		h.info.StartTime = st
	}
	go h.pumpOutput()
	if errP != nil {
		go errP.run()
	}
	h.timeout = time.AfterFunc(spec.Timeout, func() { h.terminate(OriginTimeout) })
	h.stopCtx = context.AfterFunc(ctx, func() { h.terminate(OriginCancel) })
	return h
}

// Info returns the command's identity.
func (h *Handle) Info() Info { return h.info }

// Done is closed once the command has ended and been cleaned up.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Kill asks the command to stop: SIGTERM to the group, SIGKILL after the
// grace period. The first termination request determines SignalOrigin.
func (h *Handle) Kill(origin Origin) { h.terminate(origin) }

// Wait blocks until the command has ended and returns its Result. The error
// is non-nil only for runtime failures (not for non-zero exit codes).
func (h *Handle) Wait() (Result, error) {
	<-h.done
	return h.result, h.err
}

func (h *Handle) terminate(origin Origin) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.exited || h.terminating {
		return
	}
	h.terminating = true
	h.origin = origin
	_ = SignalGroup(h.info.Pgid, syscall.SIGTERM)
	_ = SignalGroup(h.info.Pgid, syscall.SIGCONT) // a stopped member must see the TERM
	h.grace = time.AfterFunc(h.spec.Grace, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.reaped {
			_ = SignalGroup(h.info.Pgid, syscall.SIGKILL)
		}
	})
}

func (h *Handle) pumpOutput() {
	defer close(h.outDone)
	limit := h.spec.OutputBytes
	buf := make([]byte, outputChunk)
	for {
		n, err := h.outR.Read(buf)
		if n > 0 {
			h.seen += int64(n)
			if room := limit - int64(len(h.output)); room > 0 {
				kept := buf[:min(int64(n), room)]
				h.output = append(h.output, kept...)
				if h.spec.OnOutput != nil {
					h.spec.OnOutput(kept)
				}
			}
		}
		if err != nil {
			h.outErr = err
			return
		}
	}
}

// waitLoop waits for the leader, kills and reaps what is left of its group,
// drains output and removes the temp dir.
func (h *Handle) waitLoop() {
	var errs []error
	if err := WaitExitNoReap(h.info.Pid); err != nil {
		errs = append(errs, err)
	}
	ended := time.Now()
	trace := h.spec.Trace
	if trace == nil {
		trace = func(string) {}
	}
	trace("exit-seen")
	h.mu.Lock()
	h.exited = true
	origin := h.origin
	if !h.terminating {
		origin = OriginExit
	}
	h.timeout.Stop()
	h.mu.Unlock()
	h.stopCtx()

	// Kill the whole cgroup first: setsid'd and double-forked processes are
	// outside the process group but never outside the cgroup.
	var cg *CgroupReport
	if h.cgroup != nil {
		var err error
		if cg, err = KillCgroup(h.cgroup, h.spec.Resources, h.info.Pgid); err != nil {
			errs = append(errs, err)
		}
		MergeLeftovers(cg, h.sb)
		trace("teardown-cgroup-killed")
	}
	// The leader is an unreaped zombie, so -pgid still names this group:
	// nothing of it may outlive the command.
	if err := SignalGroup(h.info.Pgid, syscall.SIGKILL); err != nil {
		errs = append(errs, err)
	}
	statuses, err := ReapGroup(h.info.Pgid)
	if err != nil {
		errs = append(errs, err)
	}
	if cg != nil {
		if err := RemoveCgroup(h.cgroup, cg); err != nil { // after the reap: zombies pin a cgroup
			errs = append(errs, err)
		}
		trace("teardown-cgroup-removed")
	}
	h.mu.Lock()
	h.reaped = true
	if h.grace != nil {
		h.grace.Stop()
	}
	h.mu.Unlock()
	_ = h.proc.Release()
	exists, err := GroupExists(h.info.Pgid)
	if err != nil {
		errs = append(errs, err)
	}

	// Output: the group is gone, so EOF is due unless an escaped process
	// holds the pipe; bound the wait.
	_ = h.outR.SetReadDeadline(time.Now().Add(OutputDrainTimeout))
	<-h.outDone
	drained := errors.Is(h.outErr, io.EOF)
	if !drained {
		errs = append(errs, fmt.Errorf("procexec: output pipe of pgid %d not drained: %w", h.info.Pgid, h.outErr))
	}
	_ = h.outR.Close()
	trace("teardown-output-drained")
	if p := h.errPump; p != nil {
		_ = p.r.SetReadDeadline(time.Now().Add(OutputDrainTimeout))
		<-p.done
		if !errors.Is(p.err, io.EOF) {
			drained = false
			errs = append(errs, fmt.Errorf("procexec: stderr pipe of pgid %d not drained: %w", h.info.Pgid, p.err))
		}
		_ = p.r.Close()
	}
	h.release()
	trace("teardown-released")
	_, statErr := os.Stat(h.info.TempDir)
	tmpGone := errors.Is(statErr, os.ErrNotExist)

	ws, ok := statuses[h.info.Pid]
	code, sig := -1, ""
	if ok {
		code, sig = h.sb.ExitStatus(ws)
	} else {
		errs = append(errs, fmt.Errorf("procexec: exit status of pid %d was not collected", h.info.Pid))
	}
	h.sb.Close()
	trace("teardown-sandbox-closed")
	h.result = Result{
		ExitCode:        code,
		Signal:          sig,
		SignalOrigin:    origin,
		Output:          h.output,
		OutputBytesSeen: h.seen,
		Truncated:       h.seen > int64(len(h.output)),
		Pid:             h.info.Pid,
		Pgid:            h.info.Pgid,
		StartTime:       h.info.StartTime,
		Duration:        ended.Sub(h.started),
		CleanupComplete: !exists && drained && tmpGone && (cg == nil || cg.Kill.Empty && cg.Removed),
		Cgroup:          cg,
	}
	if p := h.errPump; p != nil {
		h.result.Stderr, h.result.StderrBytesSeen, h.result.StderrTruncated = p.out, p.seen, p.seen > int64(len(p.out))
	}
	h.err = errors.Join(errs...)
	close(h.done)
}

// pump reads one pipe, keeping at most limit bytes.
type pump struct {
	r     *os.File
	limit int64
	out   []byte
	seen  int64
	err   error // terminal read error (io.EOF when drained)
	done  chan struct{}
}

func (p *pump) run() {
	defer close(p.done)
	buf := make([]byte, outputChunk)
	for {
		n, err := p.r.Read(buf)
		if n > 0 {
			p.seen += int64(n)
			if room := p.limit - int64(len(p.out)); room > 0 {
				p.out = append(p.out, buf[:min(int64(n), room)]...)
			}
		}
		if err != nil {
			p.err = err
			return
		}
	}
}

// normalize validates spec and applies defaults.
func normalize(s *Spec) error {
	if err := ValidateArgv(s.Argv); err != nil {
		return err
	}
	if err := ValidateEnv(s.Env); err != nil {
		return err
	}
	if s.Env == nil {
		s.Env = []string{}
	}
	if s.TempDirEnv != "" && (strings.ContainsAny(s.TempDirEnv, "=\x00") || len(s.Env) >= MaxEnvVars) {
		return actuation.Refusef(actuation.CodeInvalidSpec, "invalid TempDirEnv %q", s.TempDirEnv)
	}
	switch s.Network {
	case "", NetworkNone:
		s.Network = NetworkNone
	default:
		return actuation.Refusef(actuation.CodeEgressForbidden, "network mode %q is not available; only %q (loopback only)", s.Network, NetworkNone)
	}
	switch {
	case s.Timeout < 0 || s.Grace < 0 || s.OutputBytes < 0:
		return actuation.Refusef(actuation.CodeInvalidSpec, "negative timeout, grace or output cap")
	case s.Timeout > MaxTimeout:
		return actuation.Refusef(actuation.CodeTimeoutAboveMax, "timeout %s exceeds %s", s.Timeout, MaxTimeout)
	case s.Grace > MaxGrace:
		return actuation.Refusef(actuation.CodeTimeoutAboveMax, "grace %s exceeds %s", s.Grace, MaxGrace)
	case s.OutputBytes > MaxOutputBytes || s.StderrBytes > MaxOutputBytes:
		return actuation.Refusef(actuation.CodeOutputCapAboveMax, "output cap %d (stderr %d) exceeds %d", s.OutputBytes, s.StderrBytes, MaxOutputBytes)
	case s.StderrBytes < 0:
		return actuation.Refusef(actuation.CodeInvalidSpec, "negative stderr cap")
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.Grace == 0 {
		s.Grace = DefaultGrace
	}
	if s.OutputBytes == 0 {
		s.OutputBytes = DefaultOutputBytes
	}
	if s.Dir != "" {
		if err := checkDir(s.Dir); err != nil {
			return actuation.Refusef(actuation.CodeInvalidSpec, "working directory: %v", err)
		}
	}
	if err := ValidateRoots(s.WritableRoots, s.ReadableRoots); err != nil {
		return err
	}
	return nil
}

// ValidateRoots checks the roots of a sandbox: bounded in number, absolute
// existing directories, never "/" nor overlapping the sandbox's system paths
// (refusal.InvalidSpec).
func ValidateRoots(writable, readable []string) error {
	for _, roots := range [][]string{writable, readable} {
		if len(roots) > MaxRoots {
			return actuation.Refusef(actuation.CodeInvalidSpec, "%d roots exceed the cap %d", len(roots), MaxRoots)
		}
		for _, root := range roots {
			if err := checkDir(root); err != nil {
				return actuation.Refusef(actuation.CodeInvalidSpec, "root: %v", err)
			}
			if filepath.Clean(root) != root || root == "/" {
				return actuation.Refusef(actuation.CodeInvalidSpec, "root %q must be a clean path other than the filesystem root", root)
			}
			for _, p := range reservedPaths {
				if under(root, []string{p}) || under(p, []string{root}) {
					return actuation.Refusef(actuation.CodeInvalidSpec, "root %q overlaps the sandbox's system path %s", root, p)
				}
			}
		}
	}
	return nil
}

// ValidateArgv checks an argv: Argv[0] a clean absolute path (no PATH lookup,
// no shell), no NUL bytes, bounded count and size (refusal.InvalidSpec).
func ValidateArgv(argv []string) error {
	if len(argv) == 0 || !filepath.IsAbs(argv[0]) || filepath.Clean(argv[0]) != argv[0] {
		return actuation.Refusef(actuation.CodeInvalidSpec, "argv[0] must be a clean absolute path, got %q", first(argv))
	}
	if len(argv) > MaxArgs {
		return actuation.Refusef(actuation.CodeInvalidSpec, "%d arguments exceed the cap %d", len(argv), MaxArgs)
	}
	total := 0
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return actuation.Refusef(actuation.CodeInvalidSpec, "argument contains a NUL byte")
		}
		total += len(a) + 1
	}
	if total > MaxArgBytes {
		return actuation.Refusef(actuation.CodeInvalidSpec, "argv of %d bytes exceeds the cap %d", total, MaxArgBytes)
	}
	return nil
}

// ValidateDir checks that p is an absolute path to an existing directory
// (refusal.InvalidSpec).
func ValidateDir(p string) error {
	if err := checkDir(p); err != nil {
		return actuation.Refusef(actuation.CodeInvalidSpec, "directory: %v", err)
	}
	return nil
}

// ValidateEnv checks a curated environment: K=V entries, no NUL bytes, bounded
// count and size (refusal.InvalidSpec).
func ValidateEnv(env []string) error {
	if len(env) > MaxEnvVars {
		return actuation.Refusef(actuation.CodeInvalidSpec, "%d environment variables exceed the cap %d", len(env), MaxEnvVars)
	}
	total := 0
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return actuation.Refusef(actuation.CodeInvalidSpec, "malformed environment entry %q", truncate(kv, 64))
		}
		total += len(kv) + 1
	}
	if total > MaxEnvBytes {
		return actuation.Refusef(actuation.CodeInvalidSpec, "environment of %d bytes exceeds the cap %d", total, MaxEnvBytes)
	}
	return nil
}

func checkDir(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%q is not absolute", p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%q is not a directory", p)
	}
	return nil
}

func netnsInode() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("stat /proc/self/ns/net: %w", err)
	}
	return st.Ino, nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

// proc is a running spawn, signalable by its opID while registered.
type proc struct {
	mu      sync.Mutex
	pid     int  // process group id (the leader's pid)
	done    bool // exited (the pid may be reaped and reused after this)
	revoked bool // a rebind cleared the guest: never started, or killed at start
}

// revoke kills the group if it runs and keeps a spawn that has not started from starting.
// It reports whether a running group was signalled.
func (p *proc) revoke() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.revoked = true
	if p.done || p.pid == 0 {
		return false
	}
	return unix.Kill(-p.pid, unix.SIGKILL) == nil
}

// signalGroup signals the process group unless the leader has exited (a pid is never
// signalled after it may have been reaped and reused).
func (p *proc) signalGroup(sig unix.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done || p.pid == 0 {
		return actuation.Refusef(actuation.CodeSessionNotRunning, "process has exited")
	}
	if err := unix.Kill(-p.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "kill"), err)
	}
	return nil
}

// outBudget is the one output budget shared by stdout and stderr.
type outBudget struct {
	mu        sync.Mutex
	remaining int
	truncated bool
}

type capBuffer struct {
	b   *outBudget
	buf []byte
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	n := min(len(p), c.b.remaining)
	c.buf = append(c.buf, p[:n]...)
	c.b.remaining -= n
	if n < len(p) {
		c.b.truncated = true
	}
	return len(p), nil // keep draining: the child never blocks on a full budget
}

func (a *Agent) register(id string, isSession bool, limit int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.procs[id]; dup {
		return actuation.Refusef(actuation.CodeSessionExists, "%q is already running", id)
	}
	if _, dup := a.sessions[id]; dup {
		return actuation.Refusef(actuation.CodeSessionExists, "%q is already a session", id)
	}
	if isSession {
		if len(a.sessions) >= limit {
			return actuation.Refusef(actuation.CodeSessionCapReached, "at most %d sessions", limit)
		}
		a.sessions[id] = nil // reserved
		return nil
	}
	if len(a.procs) >= limit {
		return actuation.Refusef(actuation.CodeProcessCapReached, "at most %d processes", limit)
	}
	a.procs[id] = &proc{}
	return nil
}

func envOrEmpty(env []string) []string {
	if env == nil {
		return []string{} // never the agent's own environment
	}
	return env
}

func execErr(err error) error {
	return fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeExecFailed, "%v", err), err)
}

// openStartDir is the first step of starting a process or a terminal: refused while the
// guest is quiesced, else the working directory cwd opened (the caller closes it).
func (a *Agent) openStartDir(cwd string) (int, error) {
	if a.quiesced.Load() {
		return -1, actuation.Refusef(actuation.CodeQuiesced, "the guest is quiesced")
	}
	return a.openDir(cwd)
}

func (a *Agent) spawn(ctx context.Context, opID string, args *protocol.SpawnArgs) reply {
	cwd, err := a.openStartDir(args.Cwd)
	if err != nil {
		return refused(err)
	}
	defer unix.Close(cwd)
	if err := a.register(opID, false, a.cfg.MaxProcs); err != nil {
		return refused(err)
	}
	a.mu.Lock()
	p := a.procs[opID]
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.procs, opID)
		a.mu.Unlock()
	}()

	outR, outW, err := os.Pipe()
	if err != nil {
		return refused(execErr(err))
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = outR.Close()
		_ = outW.Close()
		return refused(execErr(err))
	}
	budget := &outBudget{remaining: int(args.OutputMax)}
	stdout, stderr := &capBuffer{b: budget}, &capBuffer{b: budget}
	cmd := &exec.Cmd{
		Path:        args.Argv[0],
		Args:        args.Argv,
		Env:         envOrEmpty(args.Env),
		Dir:         fmt.Sprintf("/proc/self/fd/%d", cwd), // the directory resolved beneath the root, not a re-resolved string
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if a.cfg.Cgroups != nil {
		g, err := a.cfg.Cgroups.create()
		if err != nil {
			_ = outR.Close()
			_ = outW.Close()
			_ = errR.Close()
			_ = errW.Close()
			return refused(execErr(fmt.Errorf("command cgroup: %w", err)))
		}
		defer g.remove() // after the wait below: kills any escaped descendant
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, g.fd
	}
	start := time.Now()
	p.mu.Lock()
	if p.revoked {
		err = actuation.Refusef(actuation.CodeNonceMismatch, "the guest was re-bound before the process started")
	} else {
		err = cmd.Start()
	}
	if err == nil {
		p.pid = cmd.Process.Pid
	}
	p.mu.Unlock()
	_ = outW.Close()
	_ = errW.Close()
	if err != nil {
		_ = outR.Close()
		_ = errR.Close()
		if actuation.CodeOf(err) != "" {
			return refused(err)
		}
		return refused(execErr(err))
	}
	var wg sync.WaitGroup
	for _, pair := range []struct {
		r *os.File
		w io.Writer
	}{{outR, stdout}, {errR, stderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = pair.r.Close() }()
			_, _ = io.Copy(pair.w, pair.r) // ends at EOF or at the drain deadline below; capBuffer never fails
		}()
	}

	deadline, _ := ctx.Deadline()
	killAt := start.Add(time.Duration(args.TimeoutMS) * time.Millisecond)
	if deadline.Before(killAt) {
		killAt = deadline // the request deadline is never extended
	}
	timedOut := make(chan struct{})
	timer := time.AfterFunc(time.Until(killAt), func() {
		close(timedOut)
		_ = p.signalGroup(unix.SIGKILL) // refused only when the group already exited
	})

	// Wait without reaping first, so that the group is marked done before its pid can be
	// reused; then reap through os/exec.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	timer.Stop()
	p.mu.Lock()
	// Leftover members of the group (background children) are ended with the leader.
	_ = unix.Kill(-p.pid, unix.SIGKILL) // ESRCH: no member left
	p.done = true
	p.mu.Unlock()
	werr := cmd.Wait()
	// Output still held open by an escaped descendant is cut off after a short drain.
	drainBy := time.Now().Add(spawnIODrainAfterExit)
	_ = outR.SetReadDeadline(drainBy)
	_ = errR.SetReadDeadline(drainBy)
	wg.Wait()

	d := protocol.SpawnData{Pid: p.pid, DurationMS: uint64(time.Since(start).Milliseconds())}
	select {
	case <-timedOut:
		d.TimedOut = true
	default:
	}
	budget.mu.Lock()
	d.Truncated = budget.truncated
	budget.mu.Unlock()
	d.StdoutBytes, d.StderrBytes = uint32(len(stdout.buf)), uint32(len(stderr.buf))
	bulk := append(stdout.buf, stderr.buf...)
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		// The process ran; its status could not be collected.
		return unknown(string(actuation.CodeIOError), werr, d)
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		d.ExitCode = -1
		d.Signal = unix.SignalName(ws.Signal())
	} else {
		d.ExitCode = ws.ExitStatus()
	}
	return ok(d, bulk)
}

func (a *Agent) signal(args *protocol.SignalArgs) reply {
	sig := unix.SignalNum(args.Signal)
	if sig == 0 {
		return refused(actuation.Refusef(actuation.CodeInvalidSpec, "signal %q", args.Signal))
	}
	a.mu.Lock()
	s := a.sessions[args.Target]
	p := a.procs[args.Target]
	a.mu.Unlock()
	var err error
	switch {
	case s != nil:
		err = s.proc.signalGroup(sig)
	case p != nil:
		err = p.signalGroup(sig)
	default:
		err = actuation.Refusef(actuation.CodeSessionUnknown, "no session or running process %q", args.Target)
	}
	if err != nil {
		return refused(err)
	}
	return ok(protocol.Empty{}, nil)
}

// killAll ends every session and process group (shutdown, Close).
func (a *Agent) killAll() {
	a.mu.Lock()
	var ss []*session
	for _, s := range a.sessions {
		if s != nil {
			ss = append(ss, s)
		}
	}
	for _, p := range a.procs {
		_ = p.signalGroup(unix.SIGKILL) // refused only when the group already exited
	}
	a.mu.Unlock()
	for _, s := range ss {
		_ = s.proc.signalGroup(unix.SIGKILL)
		_ = s.ptmx.Close()
	}
}

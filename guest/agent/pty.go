package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

// session is one PTY session. Its output is kept in a bounded buffer addressed by stream
// offsets, so a reader that lost a response re-reads from its last offset.
type session struct {
	id   string
	proc *proc
	ptmx *os.File
	cmd  *exec.Cmd
	cg   *commandGroup // removed when the session's program was reaped

	mu       sync.Mutex
	buf      []byte // bytes [base, total) of the output stream
	base     uint64
	total    uint64
	notify   chan struct{} // closed (and replaced) when output arrives or the process exits
	exited   bool
	exitCode int
	signal   string
	done     chan struct{}
}

func (a *Agent) lookupSession(id string) (*session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[id]
	if s == nil {
		return nil, actuation.Refusef(actuation.CodeSessionUnknown, "no session %q", id)
	}
	return s, nil
}

// runningSession is lookupSession for an operation on the terminal itself (input,
// resize): a session whose process has exited is refused session-not-running.
func (a *Agent) runningSession(id string) (*session, error) {
	s, err := a.lookupSession(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited {
		return nil, actuation.Refusef(actuation.CodeSessionNotRunning, "session %q has exited", s.id)
	}
	return s, nil
}

func (a *Agent) ptyOpen(args *protocol.PTYOpenArgs) reply {
	cwd, err := a.openStartDir(args.Cwd)
	if err != nil {
		return refused(err)
	}
	defer unix.Close(cwd)
	if err := a.register(args.SessionID, true, a.cfg.MaxSessions); err != nil {
		return refused(err)
	}
	unregister := func() {
		a.mu.Lock()
		delete(a.sessions, args.SessionID)
		a.mu.Unlock()
	}
	cmd := &exec.Cmd{
		Path: args.Argv[0],
		Args: args.Argv,
		Env:  envOrEmpty(args.Env),
		Dir:  fmt.Sprintf("/proc/self/fd/%d", cwd),
	}
	attrs := &syscall.SysProcAttr{Setsid: true, Setctty: true}
	var cg *commandGroup
	if a.cfg.Cgroups != nil {
		if cg, err = a.cfg.Cgroups.create(); err != nil {
			unregister()
			return refused(execErr(fmt.Errorf("session cgroup: %w", err)))
		}
		attrs.UseCgroupFD, attrs.CgroupFD = true, cg.fd
	}
	ptmx, err := pty.StartWithAttrs(cmd, &pty.Winsize{Rows: args.Rows, Cols: args.Cols}, attrs)
	if err != nil {
		cg.remove()
		unregister()
		return refused(execErr(err))
	}
	s := &session{
		id:     args.SessionID,
		proc:   &proc{pid: cmd.Process.Pid},
		ptmx:   ptmx,
		cmd:    cmd,
		notify: make(chan struct{}),
		done:   make(chan struct{}),
		cg:     cg,
	}
	a.mu.Lock()
	if _, reserved := a.sessions[args.SessionID]; !reserved {
		// A rebind cleared the guest while this session started: it never serves.
		a.mu.Unlock()
		_ = s.proc.signalGroup(unix.SIGKILL)
		_ = ptmx.Close()
		_ = cmd.Wait()
		cg.remove()
		return refused(actuation.Refusef(actuation.CodeNonceMismatch, "the guest was re-bound while the session started"))
	}
	a.sessions[args.SessionID] = s
	a.mu.Unlock()
	go s.pump()
	return ok(protocol.PTYOpenData{SessionID: s.id, Pid: s.proc.pid}, nil)
}

func (s *session) wake() {
	close(s.notify)
	s.notify = make(chan struct{})
}

func (s *session) pump() {
	b := make([]byte, 32<<10)
	for {
		n, err := s.ptmx.Read(b)
		if n > 0 {
			s.mu.Lock()
			s.buf = append(s.buf, b[:n]...)
			s.total += uint64(n)
			if over := len(s.buf) - ptyBufferBytes; over > 0 {
				s.buf = append(s.buf[:0:0], s.buf[over:]...)
				s.base += uint64(over)
			}
			s.wake()
			s.mu.Unlock()
		}
		if err != nil {
			break // EIO once every slave fd is closed, or the ptmx was closed
		}
	}
	var info unix.Siginfo
	for unix.Waitid(unix.P_PID, s.proc.pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
	}
	s.proc.mu.Lock()
	s.proc.done = true
	s.proc.mu.Unlock()
	_ = s.cmd.Wait()
	s.cg.remove()
	s.mu.Lock()
	s.exited = true
	if ps := s.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			s.exitCode, s.signal = -1, unix.SignalName(ws.Signal())
		} else {
			s.exitCode = ps.ExitCode()
		}
	}
	s.wake()
	s.mu.Unlock()
	close(s.done)
}

func (a *Agent) ptyRead(ctx context.Context, args *protocol.PTYReadArgs) reply {
	s, err := a.lookupSession(args.SessionID)
	if err != nil {
		return refused(err)
	}
	waitUntil := time.Now().Add(time.Duration(args.WaitMS) * time.Millisecond)
	if d, ok := ctx.Deadline(); ok && d.Before(waitUntil) {
		waitUntil = d // the request deadline is never extended by a wait
	}
	for {
		s.mu.Lock()
		if args.Offset > s.total {
			s.mu.Unlock()
			return refused(actuation.Refusef(actuation.CodeInvalidSpec, "offset %d is beyond the stream end %d", args.Offset, s.total))
		}
		if args.Offset == s.total && !s.exited {
			if left := time.Until(waitUntil); left > 0 {
				ch := s.notify
				s.mu.Unlock()
				t := time.NewTimer(left)
				select {
				case <-ch:
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
				continue
			}
		}
		d := protocol.PTYReadData{Offset: args.Offset}
		if args.Offset < s.base {
			d.Dropped = s.base - args.Offset
			d.Offset = s.base
		}
		end := min(s.total, d.Offset+uint64(args.Max))
		data := append([]byte{}, s.buf[d.Offset-s.base:end-s.base]...)
		d.Next = end
		if s.exited && end == s.total {
			d.Exited, d.ExitCode, d.Signal = true, s.exitCode, s.signal
		}
		s.mu.Unlock()
		return ok(d, data)
	}
}

func (a *Agent) ptyInput(deadline time.Time, args *protocol.PTYInputArgs) reply {
	s, err := a.runningSession(args.SessionID)
	if err != nil {
		return refused(err)
	}
	_ = s.ptmx.SetWriteDeadline(deadline)
	defer func() { _ = s.ptmx.SetWriteDeadline(time.Time{}) }()
	n, err := s.ptmx.Write(args.Data)
	if err != nil {
		code := actuation.CodeIOError
		if errors.Is(err, os.ErrDeadlineExceeded) {
			code = actuation.CodeDeadlineExceeded
		}
		if n == 0 {
			return refused(fmt.Errorf("%w: %w", actuation.Refusef(code, "terminal input not written"), err))
		}
		// Part of the input reached the terminal; what the program made of it is not known.
		return unknown(string(code), err, protocol.PTYInputData{Written: uint32(n)})
	}
	return ok(protocol.PTYInputData{Written: uint32(n)}, nil)
}

func (a *Agent) ptyResize(args *protocol.PTYResizeArgs) reply {
	s, err := a.runningSession(args.SessionID)
	if err != nil {
		return refused(err)
	}
	// TIOCSWINSZ on the master; the kernel sends SIGWINCH to the foreground group.
	if err := pty.Setsize(s.ptmx, &pty.Winsize{Rows: args.Rows, Cols: args.Cols}); err != nil {
		return refused(fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "resize"), err))
	}
	return ok(protocol.Empty{}, nil)
}

func (a *Agent) ptyClose(ctx context.Context, args *protocol.SessionArgs) reply {
	s, err := a.lookupSession(args.SessionID)
	if err != nil {
		return refused(err)
	}
	_ = s.proc.signalGroup(unix.SIGKILL) // refused only when the group already exited
	_ = s.ptmx.Close()
	select {
	case <-s.done:
	case <-ctx.Done():
		return unknown(string(actuation.CodeDeadlineExceeded), errors.New("session killed; its exit was not observed before the deadline"), nil)
	}
	a.mu.Lock()
	delete(a.sessions, args.SessionID)
	a.mu.Unlock()
	return ok(protocol.Empty{}, nil)
}

package session

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/platform/procexec"
)

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

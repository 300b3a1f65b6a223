package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/platform/procexec"
)

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

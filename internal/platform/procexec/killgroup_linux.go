//go:build linux

package procexec

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/platform/pidfd"
)

// maxKillRounds bounds KillGroupWait's rounds: a round ends when every member seen has
// exited, so more rounds are needed only when members keep joining the group.
const maxKillRounds = 8

// KillGroupResult says how a KillGroupWait ended.
type KillGroupResult struct {
	// Gone: the kernel confirms (kill(-pgid, 0) == ESRCH) that no process, not even a
	// zombie, of the group remains.
	Gone bool
	// Unreaped counts members that have exited (their pidfd says the whole thread group
	// is gone) but are zombies of a parent other than the caller, which has not reaped
	// them yet. They run nothing and hold nothing but their pid.
	Unreaped int
}

// KillGroupWait SIGKILLs process group pgid and waits, until deadline, for every member to
// exit: each member found in /proc gets a pidfd, and the wait is a poll on those pidfds
// (an event, never a sleep loop). The caller's own children in the group are reaped. A
// member that joined the group after the scan is caught by the next round (at most
// maxKillRounds). It returns an error when a member is still running at the deadline.
func KillGroupWait(pgid int, deadline time.Time) (KillGroupResult, error) {
	for range maxKillRounds {
		if err := SignalGroup(pgid, syscall.SIGKILL); err != nil {
			return KillGroupResult{}, err
		}
		members, err := GroupMembers(pgid)
		if err != nil {
			return KillGroupResult{}, err
		}
		fds := make([]int, 0, len(members))
		for _, m := range members {
			fd, err := unix.PidfdOpen(m.Pid, 0)
			if errors.Is(err, unix.ESRCH) {
				continue // already reaped
			}
			if err != nil {
				closeAll(fds)
				return KillGroupResult{}, fmt.Errorf("pidfd_open(%d) of process group %d: %w", m.Pid, pgid, err)
			}
			fds = append(fds, fd)
		}
		werr := pidfd.Wait(fds, deadline)
		closeAll(fds)
		if werr != nil {
			return KillGroupResult{}, fmt.Errorf("process group %d after SIGKILL: %w", pgid, werr)
		}
		// Every member seen has exited: reap those that are the caller's children.
		if err := reapExited(pgid); err != nil {
			return KillGroupResult{}, err
		}
		alive, err := GroupExists(pgid)
		if err != nil {
			return KillGroupResult{}, err
		}
		if !alive {
			return KillGroupResult{Gone: true}, nil
		}
		left, err := GroupMembers(pgid)
		if err != nil {
			return KillGroupResult{}, err
		}
		running := 0
		for _, m := range left {
			if m.State != 'Z' && m.State != 'X' {
				running++
			}
		}
		if running == 0 {
			return KillGroupResult{Unreaped: len(left)}, nil
		}
		if time.Now().After(deadline) {
			break
		}
	}
	return KillGroupResult{}, fmt.Errorf("process group %d: members keep running after %d SIGKILL rounds", pgid, maxKillRounds)
}

// reapExited reaps the caller's exited children of group pgid without blocking (a member
// that joined after the scan may still run; it is the next round's).
func reapExited(pgid int) error {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-pgid, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD), err == nil && pid == 0:
			return nil
		case err != nil:
			return fmt.Errorf("wait4(-%d, WNOHANG): %w", pgid, err)
		}
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

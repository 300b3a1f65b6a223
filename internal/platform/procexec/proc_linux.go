//go:build linux

package procexec

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// EnableSubreaper marks the calling process as a child subreaper
// (PR_SET_CHILD_SUBREAPER): orphaned descendants are re-parented to it instead
// of to PID 1, so the runtime can reap a killed process group itself and
// confirm with kill(-pgid, 0) == ESRCH that nothing remains. The node agent's
// main (and test binaries' TestMain) call it once at start-up. If the agent is
// PID 1 of its container this is implied.
func EnableSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return nil
}

// WaitExitNoReap blocks until process pid (a child of the caller) has exited,
// WITHOUT reaping it. While the zombie is unreaped its pid, and therefore the
// process group id it leads, cannot be reused, so signals sent to -pgid after
// this returns still address the right group.
func WaitExitNoReap(pid int) error {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("waitid(pid %d, WNOWAIT): %w", pid, err)
		}
		return nil
	}
}

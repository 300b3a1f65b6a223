// Package pidfd waits on process file descriptors: a pidfd becomes readable when the
// whole thread group of its process has exited, so a wait for processes to end is an
// event wait (poll), never a sleep loop, and a recycled pid is never confused with the
// process that was opened.
package pidfd

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Wait blocks until every pidfd in fds reports that its process exited, or until
// deadline. It returns an error naming how many had not exited by then. It does not close
// the descriptors.
func Wait(fds []int, deadline time.Time) error {
	pending := make([]unix.PollFd, 0, len(fds))
	for _, fd := range fds {
		pending = append(pending, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	for len(pending) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%d signalled process(es) have not exited", len(pending))
		}
		n, err := unix.Poll(pending, int(left/time.Millisecond)+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll pidfds: %w", err)
		}
		if n == 0 {
			continue
		}
		next := pending[:0]
		for _, p := range pending {
			if p.Revents == 0 {
				next = append(next, p)
			}
		}
		pending = next
	}
	return nil
}

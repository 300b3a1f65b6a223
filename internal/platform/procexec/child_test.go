package procexec

import (
	"bufio"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// firstLine starts cmd and reads the first line it writes to stdout (the error is
// ReadString's: the caller decides what a child that said nothing means).
func firstLine(t *testing.T, cmd *exec.Cmd) (string, error) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return bufio.NewReader(out).ReadString('\n')
}

// reap waits in the background for pid, a helper orphaned to this test process, and
// sends its wait status.
func reap(t *testing.T, pid int) <-chan unix.WaitStatus {
	done := make(chan unix.WaitStatus, 1)
	go func() {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
			t.Errorf("wait for the orphaned helper %d: %v", pid, err)
		}
		done <- ws
	}()
	return done
}

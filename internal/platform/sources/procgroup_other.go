//go:build !linux

package sources

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// setProcessGroup runs cmd in a new process group and makes its cancellation kill the
// whole group (no parent-death signal off Linux).
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
}

// killGroupUnder does nothing off Linux (no /proc to tell a process's directory).
func killGroupUnder(int, string) {}

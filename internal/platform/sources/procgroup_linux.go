package sources

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// setProcessGroup runs cmd in a new process group, makes its cancellation kill the whole
// group (git's remote helpers and index-pack with it), and kills git if the agent dies
// (Pdeathsig): a fetch never outlives the agent that started it, so an agent restart finds
// no orphan writing into an interrupted materialization.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
}

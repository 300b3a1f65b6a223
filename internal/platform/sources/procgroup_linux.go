package sources

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
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

// killGroupUnder kills the processes of group pgid whose working directory is beneath dir.
func killGroupUnder(pgid int, dir string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := unix.Getpgid(pid); err != nil || g != pgid {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && strings.HasPrefix(cwd, strings.TrimSuffix(dir, "/")+"/") {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

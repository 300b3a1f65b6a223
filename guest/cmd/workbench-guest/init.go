package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Bounds of the PID 1 duties.
const (
	maxModulesFileBytes = 16 << 10
	maxModules          = 64
	maxAgentRestarts    = 5
)

type mountSpec struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
	mode                   os.FileMode
}

var mounts = []mountSpec{
	{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", 0o555},
	{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", 0o555},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755", 0o755},
	{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0620,ptmxmode=0666", 0o755},
	{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777", 0o1777},
	{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777", 0o1777},
	{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755", 0o755},
}

// runInit is PID 1: mount, load modules, then run the agent as a child and reap every
// process (orphans are re-parented to PID 1). The agent's exit 0 (after a shutdown
// request) powers the guest off; another exit restarts it, at most maxAgentRestarts times.
func runInit() int {
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, m.mode); err != nil {
			logf("init: mkdir %s: %v", m.target, err)
		}
		if err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data); err != nil && !errors.Is(err, unix.EBUSY) {
			logf("init: mount %s: %v", m.target, err)
		}
	}
	if _, err := os.Lstat("/dev/ptmx"); err != nil {
		_ = os.Symlink("pts/ptmx", "/dev/ptmx")
	}
	loadModules(*modulesFile)
	_ = unix.Sethostname([]byte("workbench-guest"))

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGPWR)
	go func() {
		s := <-sigs
		logf("init: %v: powering off", s)
		powerOff()
	}()

	// The kernel may hand init stray command-line words; they are not forwarded. The
	// agent runs with its defaults (vsock, fw_cfg binding) plus --under-init.
	args := []string{os.Args[0], "--under-init"}
	for restarts := 0; ; restarts++ {
		pid, err := startAgent(args)
		if err != nil {
			logf("init: start agent: %v", err)
			powerOff()
		}
		status := reapUntil(pid)
		if status.Exited() && status.ExitStatus() == 0 {
			powerOff()
		}
		logf("init: agent ended (%v)", describeStatus(status))
		if restarts >= maxAgentRestarts {
			logf("init: agent restarted %d times; powering off", restarts)
			powerOff()
		}
	}
}

func startAgent(args []string) (int, error) {
	p, err := os.StartProcess("/proc/self/exe", args, &os.ProcAttr{
		Env:   []string{"PATH=/bin"},
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		return 0, err
	}
	pid := p.Pid
	_ = p.Release() // reaped below with wait4(-1), never through os.Process
	return pid, nil
}

// reapUntil reaps every child until pid exits and returns pid's status.
func reapUntil(pid int) unix.WaitStatus {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			logf("init: wait4: %v", err)
			return ws
		}
		if got == pid {
			return ws
		}
	}
}

func describeStatus(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + unix.SignalName(ws.Signal())
	}
	return "exit " + strconv.Itoa(ws.ExitStatus())
}

// loadModules loads each listed module with finit_module, in order; a module already
// present (built in or loaded) is fine.
func loadModules(path string) {
	f, err := os.Open(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			logf("init: modules: %v", err)
		}
		return
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(io.LimitReader(f, maxModulesFileBytes))
	n := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if n++; n > maxModules {
			logf("init: modules: more than %d listed; rest ignored", maxModules)
			return
		}
		mf, err := os.Open(line)
		if err != nil {
			logf("init: module %s: %v", line, err)
			continue
		}
		err = unix.FinitModule(int(mf.Fd()), "", 0)
		_ = mf.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			logf("init: module %s: %v", line, err)
		}
	}
}

func powerOff() {
	_ = unix.Kill(-1, unix.SIGKILL) // every process but PID 1
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		logf("init: poweroff: %v", err)
	}
	os.Exit(1) // not reached as PID 1; the kernel panics (panic=-1 reboots, -no-reboot ends QEMU)
}

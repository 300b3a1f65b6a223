//go:build linux

package sandboxhelper

import (
	"errors"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The spawner is the helper binary started without new namespaces (so the parent clones it
// with CLONE_VM|CLONE_VFORK: no copy of the parent's page tables, no copy-on-write left on
// its pages) whose only work is to clone the helper proper into its new user, mount, PID,
// UTS, IPC and network namespaces, report the helper's pid on SpawnReportFD and exit. Go
// clones a child asking for a new user namespace with a full fork (the parent must write the
// child's uid_map before it execs), and a full fork costs in proportion to the forking
// process's memory: the node agent's (100–200 MB) made it ~10 ms of CPU per command, the
// spawner's (a few MB) well under one. Its exit re-parents the helper to the nearest child
// subreaper, the node agent, which waits for it as before.
const (
	// SpawnArg marks the spawner invocation in argv[1]; argv[2] is the host uid root is
	// mapped to, argv[3] SpawnTerminal or SpawnGroup.
	SpawnArg = "__sensorium_procexec_sandbox_spawn__"
	// SpawnTerminal: the helper leads a new session with its stdin (a PTY) as the
	// controlling terminal. SpawnGroup: it leads a new process group.
	SpawnTerminal = "terminal"
	SpawnGroup    = "group"
	// SpawnReportFD is ExtraFiles[3] of the spawner: it writes "pid N" or "errno N" there
	// and exits (the helper never holds it).
	SpawnReportFD = 6
	// MaxSpawnReport bounds the report the parent reads.
	MaxSpawnReport = 64
)

// runSpawner clones the helper (this binary, through ExecFD) as the parent would have,
// reports the outcome on SpawnReportFD and exits.
func runSpawner(args []string) {
	report := os.NewFile(SpawnReportFD, "procexec-spawn-report")
	if report == nil {
		os.Exit(FailExit)
	}
	unix.CloseOnExec(SpawnReportFD)
	uid, err := strconv.Atoi(args[2])
	if err != nil || uid <= 0 || (args[3] != SpawnTerminal && args[3] != SpawnGroup) {
		_, _ = report.WriteString("errno " + strconv.Itoa(int(syscall.EINVAL)) + "\n")
		os.Exit(FailExit)
	}
	attr := NamespaceAttr(uid, args[3] == SpawnTerminal)
	pid, err := syscall.ForkExec("/proc/self/fd/"+strconv.Itoa(ExecFD), []string{args[0], Arg}, &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{EnvKey + "=" + EnvValue},
		Files: []uintptr{0, 1, 2, helperConfigFD, helperStatusFD, ExecFD},
		Sys:   attr,
	})
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		_, _ = report.WriteString("errno " + strconv.Itoa(int(errno)) + "\n")
		os.Exit(FailExit)
	}
	_, _ = report.WriteString("pid " + strconv.Itoa(pid) + "\n")
	os.Exit(0)
}

// NamespaceAttr is how the helper is cloned, by the spawner or by a parent that clones it
// itself: new user (root mapped to the host uid, nothing else), mount, PID, UTS, IPC and
// network namespaces, no supplementary group of the parent, and the helper leading a new
// session with its stdin as controlling terminal (terminal) or a new process group.
func NamespaceAttr(uid int, terminal bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappingsEnableSetgroups: true,
		// No supplementary group of the parent survives.
		Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
	}
	if terminal {
		attr.Setsid, attr.Setctty, attr.Ctty = true, true, 0
	} else {
		attr.Setpgid = true
	}
	return attr
}

//go:build linux

package procexec

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// TestSpawnerHandsTheHelperToTheSubreaper: in a child subreaper (this test binary, like the
// node agent) the helper is cloned by the spawner, which exits; the helper is then this
// process's child (so it can be waited for and its group reaped), in its own user namespace
// with root mapped to the sandbox uid.
func TestSpawnerHandsTheHelperToTheSubreaper(t *testing.T) {
	requireSandbox(t)
	if !isSubreaper() {
		t.Fatal("TestMain makes this binary a child subreaper: the spawner path is not taken")
	}
	hp, err := startHelper(StartOptions{UID: DefaultSandboxUID})
	if err != nil {
		t.Fatal(err)
	}
	defer hp.discard()
	if got := procStatusField(t, hp.pid, "PPid"); got != strconv.Itoa(os.Getpid()) {
		t.Fatalf("helper %d has parent %s, want this process %d", hp.pid, got, os.Getpid())
	}
	// A child of ours that has not exited: waitid(WNOHANG) answers without ECHILD.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, hp.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		t.Fatalf("waitid(helper): %v (not our child)", err)
	}
	self, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	if theirs, err := os.Readlink("/proc/" + strconv.Itoa(hp.pid) + "/ns/user"); err != nil || theirs == self {
		t.Fatalf("helper user namespace %q (err %v), ours %q: want a new one", theirs, err, self)
	}
	uidMap, err := os.ReadFile("/proc/" + strconv.Itoa(hp.pid) + "/uid_map")
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(uidMap)); len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(int(DefaultSandboxUID)) || f[2] != "1" {
		t.Fatalf("helper uid_map %q, want 0 %d 1", uidMap, DefaultSandboxUID)
	}
}

// TestSpawnerIsReaped: spawnHelper waits for the spawner it started (no zombie is left per
// command), and the helper it reports is this process's child: Wait returns its status
// (here a helper given no configuration, which fails at once).
func TestSpawnerIsReaped(t *testing.T) {
	requireSandbox(t)
	cmd, self := spawnerCmd(t)
	proc, err := spawnHelper(cmd, self, DefaultSandboxUID, false)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.ProcessState == nil {
		t.Fatal("the spawner was not waited for")
	}
	if !cmd.ProcessState.Success() {
		t.Errorf("spawner ended %v, want exit 0 after its report", cmd.ProcessState)
	}
	st, err := proc.Wait()
	if err != nil {
		t.Fatalf("wait for the helper %d: %v (not our child)", proc.Pid, err)
	}
	if st.ExitCode() != helperFailExit {
		t.Errorf("helper without configuration: %v, want exit %d", st, helperFailExit)
	}
}

// TestSpawnerRefusalIsTheNamespaceRefusal: a spawner that cannot clone the helper (here: a
// uid it refuses to map) reports the errno, and the start is refused with
// userns-unavailable exactly as a failed clone in this process would be.
func TestSpawnerRefusalIsTheNamespaceRefusal(t *testing.T) {
	requireSandbox(t)
	cmd, self := spawnerCmd(t)
	_, err := spawnHelper(cmd, self, 0, false) // uid 0 is never a sandbox uid
	if actuation.CodeOf(err) != actuation.CodeUserNamespaceUnavailable {
		t.Fatalf("spawner with uid 0: %v (code %q), want %s", err, actuation.CodeOf(err), actuation.CodeUserNamespaceUnavailable)
	}
}

// spawnerCmd is the spawner's command as startHelper prepares it, with this test binary as
// the helper and no configuration socket nor status pipe.
func spawnerCmd(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exe.Close() })
	return &exec.Cmd{
		Path:       "/proc/self/fd/" + strconv.Itoa(helperExecFD),
		Env:        []string{helperEnvKey + "=" + helperEnvValue},
		Dir:        "/",
		ExtraFiles: []*os.File{nil, nil, exe},
	}, self
}

func procStatusField(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("read /proc/%d/status: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}

// TestForeignHelperFailsClosed: a helper binary that is not this agent's (it does not know the
// spawner's invocation and exits without a report) is refused sandbox-setup-failed: nothing
// ran, and the failure reads as the sandbox's, not as an error of the command.
func TestForeignHelperFailsClosed(t *testing.T) {
	requireSandbox(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	helper := dir + "/helper"
	if err := os.WriteFile(helper, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := startHelper(StartOptions{HelperPath: helper})
	if actuation.CodeOf(err) != actuation.CodeSandboxSetupFailed {
		t.Fatalf("foreign helper: %v (code %q), want %s", err, actuation.CodeOf(err), actuation.CodeSandboxSetupFailed)
	}
}

// TestCloneHelperDirect: a caller that is no subreaper clones the helper itself, with the
// same namespaces and mapping as the spawner gives it (sandboxhelper.NamespaceAttr).
func TestCloneHelperDirect(t *testing.T) {
	requireSandbox(t)
	cmd, self := spawnerCmd(t)
	proc, err := cloneHelper(cmd, self, DefaultSandboxUID, false)
	if err != nil {
		t.Fatal(err)
	}
	uidMap, err := os.ReadFile("/proc/" + strconv.Itoa(proc.Pid) + "/uid_map")
	st, werr := proc.Wait()
	if werr != nil {
		t.Fatalf("wait for the helper: %v", werr)
	}
	if err != nil {
		t.Fatalf("read the helper's uid_map: %v (it ended %v)", err, st)
	}
	if f := strings.Fields(string(uidMap)); len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(int(DefaultSandboxUID)) || f[2] != "1" {
		t.Fatalf("helper uid_map %q, want 0 %d 1", uidMap, DefaultSandboxUID)
	}
	if st.ExitCode() != helperFailExit {
		t.Errorf("helper without configuration: %v, want exit %d", st, helperFailExit)
	}
}

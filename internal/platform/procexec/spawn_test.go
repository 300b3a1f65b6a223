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
// with root mapped to the sandbox uid, and the spawner is gone (reaped, no zombie).
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
	// No child of ours other than the helper is a zombie (the spawner was reaped): the
	// children of every thread of this process.
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		children, err := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		if err != nil {
			continue // the thread ended meanwhile
		}
		for _, c := range strings.Fields(string(children)) {
			if c != strconv.Itoa(hp.pid) && procStatusField(t, mustAtoi(t, c), "State") == "Z" {
				t.Errorf("a zombie child %s is left (the spawner not reaped?)", c)
			}
		}
	}
}

// TestSpawnerRefusalIsTheNamespaceRefusal: a spawner that cannot clone the helper (here: a
// uid it refuses to map) reports the errno, and the start is refused with
// userns-unavailable exactly as a failed clone in this process would be.
func TestSpawnerRefusalIsTheNamespaceRefusal(t *testing.T) {
	requireSandbox(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = exe.Close() }()
	cmd := &exec.Cmd{
		Path:       "/proc/self/fd/" + strconv.Itoa(helperExecFD),
		Env:        []string{helperEnvKey + "=" + helperEnvValue},
		Dir:        "/",
		ExtraFiles: []*os.File{nil, nil, exe},
	}
	_, err = spawnHelper(cmd, self, 0, false) // uid 0 is never a sandbox uid
	if actuation.CodeOf(err) != actuation.CodeUserNamespaceUnavailable {
		t.Fatalf("spawner with uid 0: %v (code %q), want %s", err, actuation.CodeOf(err), actuation.CodeUserNamespaceUnavailable)
	}
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

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

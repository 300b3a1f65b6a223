package agent

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testCgroup makes an empty cgroup v2 group for one test on this host's cgroup2 mount
// (the unified hierarchy, wherever it is mounted); it skips, saying why, when there is
// none this test may use.
func testCgroup(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a cgroup and moves processes into it")
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no /proc/self/mountinfo: %v", err)
	}
	mnt := ""
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		for i, w := range f {
			if w == "-" && i+1 < len(f) && f[i+1] == "cgroup2" && len(f) > 4 {
				mnt = f[4]
			}
		}
		if mnt != "" {
			break
		}
	}
	if mnt == "" {
		t.Skip("no cgroup2 filesystem mounted")
	}
	dir := filepath.Join(mnt, "workbench-guest-test-"+strconv.Itoa(os.Getpid())+"-"+t.Name())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup beneath %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		_ = waitUnpopulated(filepath.Join(dir, "cgroup.events"), time.Now().Add(10*time.Second))
		_ = unix.Rmdir(filepath.Join(dir, "child"))
		_ = unix.Rmdir(dir)
	})
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		t.Skipf("cgroup.kill not offered (kernel before 5.14?): %v", err)
	}
	return dir
}

// startIn starts a shell in the group that backgrounds a second process (a descendant the
// shell does not wait for) and returns the command and the background pid.
func startIn(t *testing.T, dir string) (*exec.Cmd, int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(fd) }()
	cmd := exec.Command("/bin/sh", "-c", "sleep 1000 & echo $!; exec sleep 1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("background pid: %v", err)
	}
	bg, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("background pid %q: %v", line, err)
	}
	return cmd, bg
}

func inGroup(t *testing.T, dir string, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(b)) {
		if f == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

// TestCommandGroupReleaseKillsAndWaits: release kills the command and the descendant it
// left running, returns once the kernel reports the group empty (no sleep, no retry
// loop), and the group is gone.
func TestCommandGroupReleaseKillsAndWaits(t *testing.T) {
	dir := testCgroup(t)
	cmd, bg := startIn(t, dir)
	if !inGroup(t, dir, cmd.Process.Pid) || !inGroup(t, dir, bg) {
		t.Fatalf("processes %d and %d not both in %s", cmd.Process.Pid, bg, dir)
	}
	g := &commandGroup{dir: dir, fd: -1}
	if err := g.release(time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("group still there after release: %v", err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("command ended with %v, want killed by SIGKILL", err)
	}
}

// TestCommandGroupReleaseGivesAReason: a group that cannot be removed yields an error
// saying why instead of a silent give-up: a process that outlives the deadline (here a
// deadline already past, without cgroup.kill having been effective) and a group that
// still has a child group.
func TestCommandGroupReleaseGivesAReason(t *testing.T) {
	dir := testCgroup(t)
	_, _ = startIn(t, dir)
	err := waitUnpopulated(filepath.Join(dir, "cgroup.events"), time.Now().Add(-time.Second))
	if !errors.Is(err, errStillPopulated) {
		t.Fatalf("populated group past its deadline: %v, want errStillPopulated", err)
	}

	if err := os.Mkdir(filepath.Join(dir, "child"), 0o755); err != nil {
		t.Fatal(err)
	}
	g := &commandGroup{dir: dir, fd: -1}
	err = g.release(time.Now().Add(time.Minute))
	if err == nil || !errors.Is(err, unix.EBUSY) || !strings.Contains(err.Error(), "rmdir") {
		t.Fatalf("group with a child group: %v, want an rmdir EBUSY reason", err)
	}
	var logged []string
	g.logf = func(format string, args ...any) { logged = append(logged, format) }
	g.remove()
	if len(logged) != 1 || !strings.Contains(logged[0], "not removed") {
		t.Fatalf("remove of an unremovable group logged %q", logged)
	}
}

func TestPopulated(t *testing.T) {
	for in, want := range map[string]bool{
		"populated 0\nfrozen 0\n": false,
		"populated 1\nfrozen 0\n": true,
		"frozen 0\npopulated 0":   false,
		"":                        true, // unreadable or empty: not proven empty
		"populated x\n":           true,
	} {
		if got := populated([]byte(in)); got != want {
			t.Errorf("populated(%q) = %v, want %v", in, got, want)
		}
	}
}

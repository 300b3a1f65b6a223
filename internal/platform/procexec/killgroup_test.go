package procexec

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startGroup starts script under sh as the leader of a new process group and returns the
// command and the first line the script prints.
func startGroup(t *testing.T, script string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	line, err := firstLine(t, cmd)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("reading the script's first line: %v", err)
	}
	return cmd, strings.TrimSpace(line)
}

// The group's leader and two background members (one of which forks again) are killed;
// the orphaned grandchildren come to this subreaper and are reaped: nothing of the group
// remains.
func TestKillGroupWaitKillsEveryMember(t *testing.T) {
	cmd, _ := startGroup(t, `sleep 300 & (sleep 300 & wait) & echo ready; wait`)
	pgid := cmd.Process.Pid
	members, err := GroupMembers(pgid)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) < 3 {
		t.Fatalf("group %d has %d members before the kill, want at least 3", pgid, len(members))
	}
	res, err := KillGroupWait(pgid, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatalf("KillGroupWait: %v", err)
	}
	if !res.Gone || res.Unreaped != 0 {
		t.Fatalf("KillGroupWait = %+v, want Gone", res)
	}
	if alive, err := GroupExists(pgid); err != nil || alive {
		t.Fatalf("GroupExists(%d) = %v, %v after KillGroupWait, want false", pgid, alive, err)
	}
	// The leader was this process's child and is reaped already.
	if err := cmd.Wait(); err == nil {
		t.Fatalf("leader's Wait = nil, want it reaped by the kill")
	}
}

// A member whose parent is outside the group and never reaps it stays a zombie: the
// kill reports it exited but unreaped instead of waiting for a reaping that is not its to do.
func TestKillGroupWaitReportsZombiesOfAnotherParent(t *testing.T) {
	// The parent (own group) starts a child in a new session and group, then execs a
	// program that never waits for it. The child prints its pid once it leads its group.
	parent, line := startGroup(t, `setsid sh -c 'echo $$; exec sleep 300' & exec sleep 300`)
	t.Cleanup(func() {
		_ = parent.Process.Kill()
		_ = parent.Wait()
	})
	child, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("child pid %q: %v", line, err)
	}
	// setsid made the child the leader of its own group.
	st, err := ReadStat(child)
	if err != nil || st.Pgid != child {
		t.Fatalf("child %d stat %+v (%v), want it to lead its own group", child, st, err)
	}
	res, err := KillGroupWait(child, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatalf("KillGroupWait: %v", err)
	}
	if res.Gone || res.Unreaped != 1 {
		t.Fatalf("KillGroupWait = %+v, want one unreaped member", res)
	}
	if st, err := ReadStat(child); err != nil || st.State != 'Z' {
		t.Fatalf("child %d stat %+v (%v), want a zombie", child, st, err)
	}
}

// With nothing left in the group the wait returns at once.
func TestKillGroupWaitGoneGroup(t *testing.T) {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	res, err := KillGroupWait(cmd.Process.Pid, time.Now().Add(time.Minute))
	if err != nil || !res.Gone {
		t.Fatalf("KillGroupWait of a reaped group = %+v, %v, want Gone", res, err)
	}
}

// ReadTaskStat reads one thread's state: a stopped process's thread reads T, and not T
// once continued; a thread that does not exist is an error.
func TestReadTaskStatStopped(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	state := func() byte {
		t.Helper()
		st, err := ReadTaskStat(pid, pid)
		if err != nil || st.Pid != pid {
			t.Fatalf("ReadTaskStat(%d, %d) = %+v, %v", pid, pid, st, err)
		}
		return st.State
	}
	waitState := func(want func(byte) bool, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for s := state(); !want(s); s = state() {
			if time.Now().After(deadline) {
				t.Fatalf("thread %d state %c, want %s", pid, s, what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(func(s byte) bool { return s == 'T' }, "T")
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(func(s byte) bool { return s != 'T' }, "not T")
	if _, err := ReadTaskStat(pid, 1<<30); err == nil {
		t.Fatal("ReadTaskStat of a thread that does not exist succeeded")
	}
}

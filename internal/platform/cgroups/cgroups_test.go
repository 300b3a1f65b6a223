package cgroups

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/test/storm"
)

const testModeEnv = "CGROUPS_TEST_MODE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(testModeEnv); mode != "" {
		os.Exit(childMode(mode))
	}
	removeStaleTestParents()
	os.Exit(m.Run())
}

// removeStaleTestParents removes the parents (and groups) of earlier runs of this test
// binary that died before their cleanup ran (a panic or a timeout skips t.Cleanup).
func removeStaleTestParents() {
	if os.Geteuid() != 0 {
		return
	}
	m, err := NewManager(Config{})
	if err != nil || !m.Available() {
		return
	}
	seen := map[string]bool{}
	for _, d := range m.parentDirs() {
		ents, _ := os.ReadDir(filepath.Dir(d))
		for _, e := range ents {
			rest, ok := strings.CutPrefix(e.Name(), "workbench-test-")
			pid, _, _ := strings.Cut(rest, "-")
			n, err := strconv.Atoi(pid)
			if !ok || err != nil || seen[e.Name()] || unix.Kill(n, 0) == nil {
				continue
			}
			seen[e.Name()] = true
			if old, err := NewManager(Config{Parent: e.Name()}); err == nil {
				_, _ = old.Sweep(nil)
				for _, pd := range old.parentDirs() {
					_ = unix.Rmdir(pd)
				}
			}
		}
	}
}

// childMode: the test binary as a program inside a group. Every mode first waits for a
// byte on stdin, so the test can move it into its group before it does anything.
func childMode(mode string) int {
	var b [1]byte
	_, _ = os.Stdin.Read(b[:])
	switch mode {
	case "forkstorm":
		return storm.ForkStorm()
	case "alloc":
		// Touch memory in 16 MiB steps until the OOM killer ends us.
		return storm.Alloc()
	}
	return 3
}

// testManager returns a manager whose parent is unique to the test and removes every
// group under it (and the parent) when the test ends, pass or fail.
func testManager(t *testing.T) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cgroup tests need root (CI runs as root)")
	}
	parent := fmt.Sprintf("workbench-test-%d-%s", os.Getpid(), strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-"))
	m, err := NewManager(Config{Parent: parent})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Available() {
		t.Skipf("no usable cgroups here: %s", m.Describe())
	}
	t.Cleanup(func() {
		if rep, err := m.Sweep(nil); err != nil {
			t.Errorf("cleanup sweep: %v (%+v)", err, rep)
		}
		for _, d := range m.parentDirs() {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				t.Errorf("cleanup: rmdir %s: %v", d, err)
			}
		}
	})
	return m
}

// startHeld starts argv with a stdin pipe; the program blocks on it (childMode or a
// shell "read") until release is called.
func startHeld(t *testing.T, argv []string, env ...string) (cmd *exec.Cmd, release func()) {
	t.Helper()
	cmd = exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 10 * time.Second // background children holding the output pipe cannot hang Wait
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, func() { _, _ = io.WriteString(in, "go\n"); _ = in.Close() }
}

func TestDetect(t *testing.T) {
	m, err := NewManager(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		t.Skipf("no /sys/fs/cgroup: %v", err)
	}
	want := ModeV1
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		want = ModeV2
	}
	if m.Mode() != want {
		t.Fatalf("mode %s, statfs says %s", m.Mode(), want)
	}
	t.Logf("%s; enforced %v", m.Describe(), m.Enforced())
	if m.Available() != (len(m.Missing()) == 0) || m.Available() != (len(m.Enforced()) > 0) {
		t.Fatalf("Available %v, Missing %v, Enforced %v disagree", m.Available(), m.Missing(), m.Enforced())
	}
}

func TestUnavailableFailsClosed(t *testing.T) {
	// A root without any hierarchy: detection says unavailable and Create refuses.
	m, err := NewManager(Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if m.Mode() != ModeUnavailable || m.Available() || len(m.Enforced()) != 0 {
		t.Fatalf("mode %s available %v enforced %v", m.Mode(), m.Available(), m.Enforced())
	}
	if _, err := m.Create(KindCommand, "x", Limits{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Create on no hierarchy: %v, want ErrUnavailable", err)
	}
	// A v1 layout missing the pids controller: unavailable for every class.
	root := t.TempDir()
	for _, c := range []string{"memory", "cpu", "freezer"} {
		if err := os.MkdirAll(filepath.Join(root, c), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, c, "cgroup.procs"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err = NewManager(Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if m.Mode() != ModeV1 || m.Available() || fmt.Sprint(m.Missing()) != "[pids]" {
		t.Fatalf("mode %s available %v missing %v", m.Mode(), m.Available(), m.Missing())
	}
	for _, k := range []Kind{KindCommand, KindSession, KindVM} {
		if _, err := m.Create(k, "x", Limits{Pids: 10}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Create %s without pids: %v, want ErrUnavailable", k, err)
		}
	}
}

func TestNamesAndLimitsValidated(t *testing.T) {
	for _, bad := range []string{"", "../x", "a/b", "-x", strings.Repeat("a", 129), "a b"} {
		if _, err := GroupName(KindCommand, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("GroupName(cmd, %q) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := GroupName("pod", "x"); !errors.Is(err, ErrInvalid) {
		t.Error("unknown kind accepted")
	}
	n, err := GroupName(KindSession, "0b1e-uid.1")
	if err != nil || n != "sess-0b1e-uid.1" {
		t.Fatalf("GroupName = %q, %v", n, err)
	}
	if k, id, ok := ParseName(n); !ok || k != KindSession || id != "0b1e-uid.1" {
		t.Fatalf("ParseName(%q) = %q %q %v", n, k, id, ok)
	}
	for _, l := range []Limits{{Pids: -1}, {MemoryBytes: 1 << 20}, {CPUMillis: -5}} {
		if err := l.validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("limits %+v accepted", l)
		}
	}
	for _, p := range []string{"/abs", "../up", "a/../..", "."} {
		if _, err := NewManager(Config{Parent: p}); !errors.Is(err, ErrInvalid) {
			t.Errorf("parent %q accepted", p)
		}
	}
	if q, p := (Limits{CPUMillis: 1500}).cpuQuota(); q != 150000 || p != 100000 {
		t.Errorf("cpu quota for 1.5 CPU = %d/%d", q, p)
	}
}

func TestCreateLimitAddKillDelete(t *testing.T) {
	m := testManager(t)
	g, err := m.Create(KindCommand, "basic", Limits{Pids: 64, MemoryBytes: 64 << 20, CPUMillis: 500})
	if err != nil {
		t.Fatal(err)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.PidsLimit != 64 || st.MemoryLimitBytes != 64<<20 {
		t.Fatalf("limits not applied: %+v", st)
	}
	if m.Mode() == ModeV1 {
		b, err := os.ReadFile(filepath.Join(g.dir(CPU), "cpu.cfs_quota_us"))
		if err != nil || strings.TrimSpace(string(b)) != "50000" {
			t.Fatalf("cpu quota %q, %v", b, err)
		}
	}
	// A shell that starts three background sleepers once released.
	cmd, release := startHeld(t, []string{"/bin/sh", "-c", "read x; sleep 300 & sleep 300 & sleep 300 & wait"})
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if !g.Contains(cmd.Process.Pid) {
		t.Fatalf("pid %d not in the group after Add", cmd.Process.Pid)
	}
	release()
	waitMembers(t, g, 4)
	rep, err := g.Kill()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Empty || rep.Found != 4 || rep.Rounds < 1 {
		t.Fatalf("kill report %+v", rep)
	}
	if !strings.Contains(rep.Summary(), "killed 4 process(es)") || !strings.Contains(rep.Summary(), fmt.Sprintf("%d(sh)", cmd.Process.Pid)) {
		t.Fatalf("summary %q", rep.Summary())
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("the shell survived the kill")
	}
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
	for _, d := range g.dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still exists after Delete: %v", d, err)
		}
	}
	if !m.RemoveParent() {
		t.Fatal("the parent of no group could not be removed")
	}
	// Killing an empty or deleted group is a no-op that reports empty.
	if rep, err := g.Kill(); err != nil || !rep.Empty || rep.Found != 0 {
		t.Fatalf("kill of a deleted group: %+v %v", rep, err)
	}
}

// waitMembers waits (bounded) until the group has at least n live members.
func waitMembers(t *testing.T, g *Group, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := g.Pids()
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s has %d members, want %d", g.Path(), len(pids), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A setsid + double-fork daemon leaves its session and process group but not its cgroup.
func TestKillCatchesSetsidDoubleFork(t *testing.T) {
	m := testManager(t)
	g, err := m.Create(KindSession, "daemon", Limits{Pids: 32})
	if err != nil {
		t.Fatal(err)
	}
	// Double fork: a subshell starts the daemon in a new session and exits, then the
	// launcher exits; the daemon is an orphan outside the launcher's session and group.
	cmd, release := startHeld(t, []string{"/bin/sh", "-c", "read x; ( /usr/bin/setsid /bin/sleep 300 </dev/null >/dev/null 2>&1 & ); exit 0"})
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	release()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("launcher: %v", err)
	}
	waitMembers(t, g, 1)
	pids, _ := g.Pids()
	daemon := readProc(pids[0])
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", daemon.Pid)); err == nil {
		f := strings.Fields(string(st)[strings.LastIndexByte(string(st), ')')+1:])
		if f[3] == strconv.Itoa(cmd.Process.Pid) {
			t.Fatalf("the daemon did not leave the launcher's session: %s", st)
		}
	}
	rep, err := g.Kill()
	if err != nil || !rep.Empty || rep.Found != 1 {
		t.Fatalf("kill: %+v %v", rep, err)
	}
	if err := unix.Kill(daemon.Pid, 0); err == nil {
		// It may be a zombie awaiting its (new) parent; it must not be running.
		if p := readProc(daemon.Pid); p.Comm != "" {
			if s := procState(daemon.Pid); s != "Z" {
				t.Fatalf("daemon %v still running (state %s)", daemon, s)
			}
		}
	}
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
}

func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+1:])
	return f[0]
}

// A fork storm above pids.max is refused inside the group; the refusals are counted.
func TestForkStormRefusedAtPidsLimit(t *testing.T) {
	m := testManager(t)
	const limit = 16
	g, err := m.Create(KindCommand, "forkstorm", Limits{Pids: limit})
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd, release := startHeld(t, []string{self}, testModeEnv+"=forkstorm", "GOMAXPROCS=1")
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	release()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("storm: %v %q", err, cmd.Stdout)
	}
	out := cmd.Stdout.(*strings.Builder).String()
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	pids, _ := g.Pids()
	t.Logf("shell: %q; stats %+v; %d members", strings.TrimSpace(out), st, len(pids))
	var started, refused int
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "started=%d refused=%d", &started, &refused); err != nil {
		t.Fatalf("storm output %q: %v", out, err)
	}
	if started+refused != 200 || refused < 200-limit || st.PidsMaxHits < uint64(refused) {
		t.Fatalf("started %d, refused %d, pids.events max %d: want at least %d refusals, all counted", started, refused, st.PidsMaxHits, 200-limit)
	}
	if len(pids) > limit || st.PidsPeak > limit {
		t.Fatalf("%d members (peak %d) above the limit %d", len(pids), st.PidsPeak, limit)
	}
	if !strings.Contains(st.Summary(), "fork(s) refused at the cgroup pids limit of 16") {
		t.Fatalf("summary %q", st.Summary())
	}
	// The host is unaffected: this test process can still fork.
	if out, err := exec.Command("/bin/true").CombinedOutput(); err != nil {
		t.Fatalf("host fork failed after the storm: %v %s", err, out)
	}
	rep, err := g.Kill()
	if err != nil || !rep.Empty || rep.Found != len(pids) {
		t.Fatalf("kill: %+v %v (had %d members)", rep, err, len(pids))
	}
}

// A memory storm is OOM-killed inside its group; the counters say so.
func TestMemoryStormOOMKilledInGroup(t *testing.T) {
	m := testManager(t)
	g, err := m.Create(KindCommand, "memstorm", Limits{Pids: 64, MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd, release := startHeld(t, []string{self}, testModeEnv+"=alloc")
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	release()
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("allocator ended with %v, output %q", err, cmd.Stdout)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("allocator ended with %v, want SIGKILL by the OOM killer", ws)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats %+v", st)
	// The peak may pass the limit by a few pages charged while the kernel reclaims.
	if st.OOMKills < 1 || st.MemoryPeakBytes > 65<<20 || st.MemoryPeakBytes < 32<<20 {
		t.Fatalf("stats %+v: want an OOM kill and a peak near the 64 MiB limit", st)
	}
	if !strings.Contains(st.Summary(), "OOM-killed at the cgroup memory limit of 67108864 bytes") {
		t.Fatalf("summary %q", st.Summary())
	}
}

// Sweep removes every group a previous run left behind (with its processes) except
// those kept; Create of an existing name starts from an empty group.
func TestSweepRemovesLeftovers(t *testing.T) {
	m := testManager(t)
	var held []*exec.Cmd
	for _, id := range []string{"a", "b", "c"} {
		g, err := m.Create(KindCommand, id, Limits{Pids: 8})
		if err != nil {
			t.Fatal(err)
		}
		cmd, _ := startHeld(t, []string{"/bin/sh", "-c", "read x"})
		if err := g.Add(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		held = append(held, cmd)
	}
	if _, err := m.Create(KindVM, "keep", Limits{}); err != nil {
		t.Fatal(err)
	}
	// A second manager, as after an agent restart, sees the groups on disk.
	m2, err := NewManager(Config{Parent: m.Parent()})
	if err != nil {
		t.Fatal(err)
	}
	names, err := m2.List()
	if err != nil || strings.Join(names, ",") != "cmd-a,cmd-b,cmd-c,vm-keep" {
		t.Fatalf("List = %v, %v", names, err)
	}
	rep, err := m2.Sweep(func(n string) bool { return n == "cmd-b" || n == "vm-keep" })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rep.Removed, ",") != "cmd-a,cmd-c" || rep.Killed != 2 || len(rep.Failed) != 0 {
		t.Fatalf("sweep report %+v", rep)
	}
	for i, cmd := range held {
		if i == 1 {
			continue // kept: still blocked on stdin, killed by cleanup
		}
		if err := cmd.Wait(); err == nil {
			t.Fatalf("process of a swept group survived")
		}
	}
	if names, _ := m2.List(); strings.Join(names, ",") != "cmd-b,vm-keep" {
		t.Fatalf("after sweep: %v", names)
	}
	// Re-creating a name that still exists kills what is in it.
	g, err := m2.Create(KindCommand, "b", Limits{Pids: 8})
	if err != nil {
		t.Fatal(err)
	}
	if pids, _ := g.Pids(); len(pids) != 0 {
		t.Fatalf("re-created group inherited %v", pids)
	}
}

// StartCmd: the child is born in the group (its first fork too), and no thread of the
// caller stays there.
func TestStartCmdBornInGroup(t *testing.T) {
	m := testManager(t)
	g, err := m.Create(KindSession, "born", Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		cmd := exec.Command("/bin/sh", "-c", "/bin/sleep 300 & exec /bin/sleep 301")
		cmd.WaitDelay = 10 * time.Second
		if err := g.StartCmd(cmd); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if !g.Contains(cmd.Process.Pid) {
			t.Fatalf("round %d: pid %d not in the group", i, cmd.Process.Pid)
		}
	}
	waitMembers(t, g, 40)
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, tk := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + tk.Name() + "/cgroup")
		if strings.Contains(string(b), g.Path()) {
			t.Fatalf("thread %s of the test is still in %s:\n%s", tk.Name(), g.Path(), b)
		}
	}
	rep, err := g.Kill()
	if err != nil || rep.Found != 40 || !rep.Empty {
		t.Fatalf("kill %+v %v", rep, err)
	}
}

// unifiedRoot returns a cgroup2 mount (the hybrid machines' /sys/fs/cgroup/unified, or
// /sys/fs/cgroup itself on a v2 node), skipping the test without root or without one.
func unifiedRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cgroup tests need root (CI runs as root)")
	}
	for _, r := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(r, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return r
		}
	}
	t.Skip("no cgroup2 mount on this machine")
	return ""
}

// TestV2KillAndBirthOnUnifiedMount exercises the v2 mechanisms that need no controller
// (CLONE_INTO_CGROUP birth, cgroup.procs, cgroup.kill, the cgroup.events wait, rmdir) on a
// real cgroup2 mount: the hybrid machines' /sys/fs/cgroup/unified, or /sys/fs/cgroup
// itself on a v2 node. The limits need controllers and are covered where the node has them.
func TestV2KillAndBirthOnUnifiedMount(t *testing.T) {
	root := unifiedRoot(t)
	parent := fmt.Sprintf("workbench-test-%d-v2", os.Getpid())
	m := &Manager{mode: ModeV2, root: root, parent: parent, have: map[Controller]bool{}}
	g := &Group{m: m, name: "cmd-v2"}
	if err := os.MkdirAll(g.dir(""), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = g.Kill()
		_ = g.Delete()
		_ = unix.Rmdir(filepath.Join(root, parent))
	})
	if got := detectMode(root); got != ModeV2 {
		t.Fatalf("detectMode(%s) = %s", root, got)
	}
	cmd := exec.Command("/bin/sh", "-c", "/usr/bin/setsid /bin/sleep 300 & /bin/sleep 300 & exec /bin/sleep 301")
	cmd.WaitDelay = 10 * time.Second
	if err := g.StartCmd(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !g.Contains(cmd.Process.Pid) {
		t.Fatalf("pid %d not born in %s", cmd.Process.Pid, g.dir(""))
	}
	waitMembers(t, g, 3)
	rep, err := g.Kill()
	if err != nil || !rep.Empty || rep.Found != 3 {
		t.Fatalf("v2 kill: %+v %v", rep, err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("the leader survived cgroup.kill")
	}
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.dir("")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("group dir still there: %v", err)
	}
	// Without pids, memory and cpu in cgroup.controllers, a v2 manager is unavailable.
	mm, err := NewManager(Config{Root: root, Parent: parent})
	if err != nil {
		t.Fatal(err)
	}
	if mm.Mode() != ModeV2 {
		t.Fatalf("mode %s", mm.Mode())
	}
	b, _ := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	full := strings.Contains(string(b), "pids") && strings.Contains(string(b), "memory") && strings.Contains(string(b), "cpu")
	if mm.Available() != full {
		t.Fatalf("available %v with controllers %q", mm.Available(), b)
	}
}

package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/test/cgrouptest"
	"sensorium.dev/workbench/internal/test/proctest"
	"sensorium.dev/workbench/internal/test/storm"
)

// cgroupModeEnv switches the test binary, run as a session program, into a cgroup storm.
// It is checked in init so it works whatever TestMain does.
const cgroupModeEnv = "SESSION_CGROUP_TEST_MODE"

func init() {
	switch os.Getenv(cgroupModeEnv) {
	case "":
		return
	case "forkstorm":
		if code := storm.ForkStorm(); code != 0 {
			os.Exit(code)
		}
		var b [1]byte
		_, _ = os.Stdin.Read(b[:]) // stay until the session is closed
		os.Exit(0)
	case "alloc":
		os.Exit(storm.Alloc())
	}
	os.Exit(6)
}

// cgroupHarness is a harness whose sessions get cgroups under a parent unique to the
// test; every group and the parent are removed when the test ends, pass or fail.
func cgroupHarness(t *testing.T) (*harness, *cgroups.Manager) {
	t.Helper()
	cm := cgrouptest.Manager(t)
	return newHarness(t, Caps{}, WithCgroups(cm)), cm
}

func selfExe(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A setsid + double-fork daemon started from a PTY program leaves the session's
// session and process groups, not its cgroup: Close kills it and reports it.
func TestCgroupSessionDaemonGoneAfterClose(t *testing.T) {
	h, cm := cgroupHarness(t)
	marker := fmt.Sprintf("300.%d", os.Getpid()%100000+1)
	s := h.open(Spec{ID: "daemon", Env: shellEnv, Argv: []string{"/bin/sh", "-c",
		"( /usr/bin/setsid /bin/sh -c '/bin/sleep " + marker + "; :' </dev/null >/dev/null 2>&1 & ); echo launched; exec /bin/sleep 300"}})
	waitOutput(t, s, "launched")
	waitDaemon(t, marker)
	if !inGroup(cm, "sess-daemon", s.Info().Pid) {
		t.Fatalf("the session's program %d is not in its cgroup", s.Info().Pid)
	}
	closeSession(t, s)
	if left := proctest.WithArg(marker); len(left) > 0 {
		t.Fatalf("daemon processes %v survived Close", left)
	}
	rep := s.CgroupReport()
	if rep == nil || !rep.Kill.Empty || !rep.Removed || !s.CleanupComplete() {
		t.Fatalf("cgroup report %+v cleanup %v", rep, s.CleanupComplete())
	}
	t.Logf("cgroup report: %s", rep.Summary())
	if rep.Kill.Found < 1 {
		t.Fatalf("the teardown did not report the daemon: %+v", rep.Kill)
	}
	if names, _ := cm.List(); len(names) != 0 {
		t.Fatalf("groups left: %v", names)
	}
}

// waitDaemon waits (bounded) until the daemon runs its marked sleep, i.e. it has left
// the session (setsid ran before the exec).
func waitDaemon(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for len(proctest.WithArg("/bin/sleep\x00"+marker+"\x00")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("daemon with %s never started", marker)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func inGroup(cm *cgroups.Manager, name string, pid int) bool {
	g, err := cm.Load(name)
	return err == nil && g.Contains(pid)
}

// A fork storm in a PTY program is refused at the session's pids limit.
func TestCgroupSessionForkStormRefused(t *testing.T) {
	h, _ := cgroupHarness(t)
	const limit = 16
	s := h.open(Spec{ID: "storm", Argv: []string{selfExe(t)}, Env: []string{cgroupModeEnv + "=forkstorm", "GOMAXPROCS=1"},
		Resources: cgroups.Limits{Pids: limit}})
	out := waitOutput(t, s, "\r\n")
	var started, refused int
	if _, err := fmt.Sscanf(strings.TrimSpace(out[strings.Index(out, "started="):]), "started=%d refused=%d", &started, &refused); err != nil {
		t.Fatalf("storm output %q: %v", out, err)
	}
	if refused < 200-limit {
		t.Fatalf("refused %d forks, want >= %d", refused, 200-limit)
	}
	if o, err := exec.Command("/bin/true").CombinedOutput(); err != nil {
		t.Fatalf("host fork during the storm: %v %s", err, o)
	}
	closeSession(t, s) // the sleepers share the program's process group: SIGHUP/SIGTERM end them
	rep := s.CgroupReport()
	if rep == nil || rep.Stats.PidsMaxHits < uint64(refused) || !rep.Kill.Empty || !rep.Removed {
		t.Fatalf("cgroup report %+v (started %d refused %d)", rep, started, refused)
	}
	if !strings.Contains(rep.Summary(), "fork(s) refused at the cgroup pids limit of 16") {
		t.Fatalf("summary %q", rep.Summary())
	}
}

// A memory storm in a PTY program is OOM-killed inside the session's cgroup.
func TestCgroupSessionMemoryStormOOMKilled(t *testing.T) {
	h, _ := cgroupHarness(t)
	s := h.open(Spec{ID: "mem", Argv: []string{selfExe(t)}, Env: []string{cgroupModeEnv + "=alloc"},
		Resources: cgroups.Limits{MemoryBytes: 64 << 20}})
	waitDone(t, s)
	rep := s.CgroupReport()
	if ex := s.Exit(); ex.Signal != "SIGKILL" || rep == nil || rep.Stats.OOMKills < 1 {
		t.Fatalf("exit %+v, cgroup report %+v", ex, rep)
	}
	// The manager keeps serving.
	s2 := h.open(Spec{ID: "after", Env: shellEnv, Argv: []string{"/bin/sh", "-c", "echo alive"}})
	waitOutput(t, s2, "alive")
	waitDone(t, s2)
}

func TestCgroupSessionUnavailableFailsClosed(t *testing.T) {
	cm, err := cgroups.NewManager(cgroups.Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(Caps{}, WithCgroups(cm))
	marker := filepath.Join(t.TempDir(), "ran")
	_, err = m.Open(context.Background(), Spec{ID: "nocg", Argv: []string{"/bin/touch", marker}})
	if !(actuation.CodeOf(err) == actuation.CodeCgroupUnavailable) {
		t.Fatalf("Open without cgroups: %v, want %s", err, string(actuation.CodeCgroupUnavailable))
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the program ran without its cgroup: %v", err)
	}
	if m.Active() != 0 {
		t.Fatalf("slot not released")
	}
}

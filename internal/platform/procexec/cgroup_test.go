package procexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/test/cgrouptest"
	"sensorium.dev/workbench/internal/test/proctest"
	"sensorium.dev/workbench/internal/test/storm"
)

// cgroupModeEnv switches the test binary, run as a sandboxed program, into a cgroup
// storm. It is checked in init so it works whatever TestMain does.
const cgroupModeEnv = "PROCEXEC_CGROUP_TEST_MODE"

func init() {
	switch os.Getenv(cgroupModeEnv) {
	case "":
		return
	case "forkstorm":
		os.Exit(storm.ForkStorm())
	case "alloc":
		os.Exit(storm.Alloc())
	}
	os.Exit(6)
}

// cgroupRunner returns a Runner whose commands get cgroups under a parent unique to the
// test; every group and the parent are removed when the test ends, pass or fail.
func cgroupRunner(t testing.TB) (*Runner, *cgroups.Manager) {
	t.Helper()
	requireSandbox(t)
	m := cgrouptest.Manager(t)
	return NewRunner(Limits{Cgroups: m}), m
}

func runWith(t *testing.T, r *Runner, spec Spec) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := r.Run(ctx, spec)
	if err != nil {
		t.Fatalf("Run(%q): %v", spec.Argv, err)
	}
	return res
}

func TestCgroupHelperEntersGroupBeforeConfig(t *testing.T) {
	r, m := cgroupRunner(t)
	// Inside, the program sees only its own cgroup namespace ("/"): look from the host.
	h, err := r.Start(context.Background(), Spec{Argv: []string{"/bin/sh", "-c", "cat /proc/self/cgroup; exec /bin/sleep 30"}, CgroupID: "entered"})
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", h.Info().Pid))
	// Kill only once the shell has exec'd sleep: a kill while cat still runs leaves cat for
	// the cgroup kill to find, which the report rightly counts (Found: 1).
	for deadline := time.Now().Add(10 * time.Second); ; {
		if comms := descendantComms(h.Info().Pid); slices.Contains(comms, "sleep") && !slices.Contains(comms, "cat") {
			break
		}
		if time.Now().After(deadline) {
			h.Kill(OriginOperator)
			_, _ = h.Wait()
			t.Fatalf("the program never reached exec of sleep under pid %d", h.Info().Pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.Kill(OriginOperator)
	res, werr := h.Wait()
	if err != nil || werr != nil {
		t.Fatal(err, werr)
	}
	want := "/" + m.Parent() + "/cmd-entered"
	if !bytes.Contains(host, []byte(want)) {
		t.Fatalf("the sandbox helper is not in %s: /proc/<pid>/cgroup:\n%s", want, host)
	}
	if bytes.Contains(res.Output, []byte(m.Parent())) {
		t.Fatalf("the program sees the host's cgroup paths:\n%s", res.Output)
	}
	if res.Cgroup == nil || !res.Cgroup.Removed || !res.Cgroup.Kill.Empty || res.Cgroup.Kill.Found != 0 || !res.CleanupComplete {
		t.Fatalf("cgroup report %+v, cleanup %v", res.Cgroup, res.CleanupComplete)
	}
	if res.Cgroup.Limits.Pids != cgroups.DefaultCommandPids || res.Cgroup.Limits.MemoryBytes != cgroups.DefaultCommandMemoryBytes {
		t.Fatalf("defaults not applied: %+v", res.Cgroup.Limits)
	}
	if names, _ := m.List(); len(names) != 0 {
		t.Fatalf("groups left after the command: %v", names)
	}
}

// A fork storm above the pids limit is refused inside the command's cgroup; the outcome
// counts the refused forks and the leftover sleepers are killed with the cgroup.
func TestCgroupForkStormRefused(t *testing.T) {
	r, _ := cgroupRunner(t)
	const limit = 16
	res := runWith(t, r, Spec{
		Argv: []string{selfExe(t)}, Env: []string{cgroupModeEnv + "=forkstorm", "GOMAXPROCS=1"},
		Resources: cgroups.Limits{Pids: limit},
	})
	var started, refused int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(res.Output)), "started=%d refused=%d", &started, &refused); err != nil || res.ExitCode != 0 {
		t.Fatalf("storm: exit %d output %q: %v", res.ExitCode, res.Output, err)
	}
	cg := res.Cgroup
	t.Logf("started %d, refused %d; %s", started, refused, cg.Summary())
	if refused < 200-limit || cg.Stats.PidsMaxHits < uint64(refused) || cg.Stats.PidsPeak > limit {
		t.Fatalf("refused %d (want >= %d), pids.events max %d, peak %d", refused, 200-limit, cg.Stats.PidsMaxHits, cg.Stats.PidsPeak)
	}
	if !strings.Contains(cg.Summary(), "fork(s) refused at the cgroup pids limit of 16") {
		t.Fatalf("summary %q", cg.Summary())
	}
	if cg.Kill.Found != started || !cg.Kill.Empty || !res.CleanupComplete {
		t.Fatalf("kill found %d of %d sleepers, empty %v, cleanup %v", cg.Kill.Found, started, cg.Kill.Empty, res.CleanupComplete)
	}
	// The host is unaffected.
	if out, err := exec.Command("/bin/true").CombinedOutput(); err != nil {
		t.Fatalf("host fork after the storm: %v %s", err, out)
	}
}

// A memory storm is OOM-killed inside its cgroup, the outcome says so, and the runner
// keeps serving.
func TestCgroupMemoryStormOOMKilled(t *testing.T) {
	r, _ := cgroupRunner(t)
	res := runWith(t, r, Spec{
		Argv: []string{selfExe(t)}, Env: []string{cgroupModeEnv + "=alloc"},
		Resources: cgroups.Limits{MemoryBytes: 64 << 20},
	})
	cg := res.Cgroup
	if res.Signal != "SIGKILL" || res.SignalOrigin != OriginExit || cg == nil || cg.Stats.OOMKills < 1 {
		t.Fatalf("result %+v, cgroup %+v", res, cg)
	}
	if !strings.Contains(cg.Summary(), "OOM-killed at the cgroup memory limit of 67108864 bytes") {
		t.Fatalf("summary %q", cg.Summary())
	}
	if res2 := runWith(t, r, Spec{Argv: []string{"/bin/true"}}); res2.ExitCode != 0 || !res2.CleanupComplete {
		t.Fatalf("next command after the OOM: %+v", res2)
	}
}

// A setsid + double-fork daemon leaves the command's process group and session but not
// its cgroup: it is gone when the Result is returned, and the Result says what was left.
func TestCgroupDaemonKilledAtTeardown(t *testing.T) {
	r, _ := cgroupRunner(t)
	marker := fmt.Sprintf("300.%d", os.Getpid()%100000)
	script := "( /usr/bin/setsid /bin/sh -c '/bin/sleep " + marker + "; :' </dev/null >/dev/null 2>&1 & ); echo launched"
	res := runWith(t, r, Spec{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}})
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Output)) != "launched" {
		t.Fatalf("launcher: %+v", res)
	}
	if left := proctest.WithArg(marker); len(left) > 0 {
		t.Fatalf("daemon processes %v survived the command", left)
	}
	cg := res.Cgroup
	t.Logf("cgroup report: %s", cg.Summary())
	if !cg.Kill.Empty || !cg.Removed || !res.CleanupComplete {
		t.Fatalf("cgroup %+v cleanup %v", cg, res.CleanupComplete)
	}
	if cg.Kill.Found < 1 || !strings.Contains(cg.Summary(), "left in the cgroup") {
		t.Fatalf("the outcome does not report the daemon: %+v", cg.Kill)
	}
}

func TestCgroupUnavailableFailsClosed(t *testing.T) {
	requireSandbox(t)
	m, err := cgroups.NewManager(cgroups.Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRunner(Limits{Cgroups: m})
	marker := filepath.Join(t.TempDir(), "ran")
	_, err = r.Run(context.Background(), Spec{Argv: []string{"/bin/touch", marker}, WritableRoots: []string{filepath.Dir(marker)}})
	if !(actuation.CodeOf(err) == actuation.CodeCgroupUnavailable) {
		t.Fatalf("Run without cgroups: %v, want %s", err, string(actuation.CodeCgroupUnavailable))
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the program ran without its cgroup: %v", err)
	}
}

// BenchmarkProcexecTrueCgroup is BenchmarkProcexecTrue with a cgroup per command (create,
// move, teardown kill, remove): compare the two in the same run for the cgroup's cost.
func BenchmarkProcexecTrueCgroup(b *testing.B) {
	requireSandbox(b)
	parent := fmt.Sprintf("workbench-bench-%d", os.Getpid())
	m, err := cgroups.NewManager(cgroups.Config{Parent: parent})
	if err != nil || !m.Available() {
		b.Skipf("no usable cgroups: %v", err)
	}
	b.Cleanup(func() {
		_, _ = m.Sweep(nil)
		for _, c := range []string{"", "pids", "memory", "cpu", "freezer"} {
			_ = unix.Rmdir(filepath.Join("/sys/fs/cgroup", c, parent))
		}
	})
	r := NewRunner(Limits{Cgroups: m})
	ctx := context.Background()
	for b.Loop() {
		res, err := r.Run(ctx, Spec{Argv: []string{"/bin/true"}})
		if err != nil || res.ExitCode != 0 || res.Cgroup == nil || !res.Cgroup.Removed {
			b.Fatal(res, err)
		}
	}
}

// descendantComms lists the command names of pid and its descendants, read from /proc.
func descendantComms(pid int) []string {
	parent := map[int]int{}
	comm := map[int]string{}
	pids, _ := proctest.Pids()
	for _, p := range pids {
		b, err := os.ReadFile(proctest.Path(p, "stat"))
		if err != nil {
			continue
		}
		open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || closing < open {
			continue
		}
		fields := strings.Fields(string(b[closing+1:]))
		if len(fields) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(fields[1])
		parent[p], comm[p] = pp, string(b[open+1:closing])
	}
	out := []string{comm[pid]}
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, comm[p])
				break
			}
		}
	}
	return out
}

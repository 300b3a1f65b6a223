package procexec

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"sensorium.dev/workbench/internal/platform/cgroups"
)

// idlePooled returns the runner's idle pre-started helpers.
func idlePooled(r *Runner) []*pooledSandbox {
	return r.pool.Idle()
}

func prestartedRunner(t *testing.T, n int) (*Runner, *cgroups.Manager) {
	t.Helper()
	_, m := cgroupRunner(t)
	r := NewRunner(Limits{HelperPath: slimHelper(t), Cgroups: m, PrestartedSandboxes: n})
	t.Cleanup(r.Close)
	// Fill synchronously for the test: one prestart per slot.
	if err := r.pool.Warm(); err != nil {
		t.Fatal(err)
	}
	return r, m
}

// TestPrestartedSandboxRunsCommandWithItsLimits: a command started from a pre-started helper
// runs confined exactly like one started on demand (no capability, own PID namespace,
// output captured), in a cgroup that enforces the command's limits (set when it is taken),
// and the helper serves once.
func TestPrestartedSandboxRunsCommandWithItsLimits(t *testing.T) {
	r, m := prestartedRunner(t, 1)
	pooled := idlePooled(r)
	if len(pooled) != 1 {
		t.Fatalf("%d idle helpers, want 1", len(pooled))
	}
	helperPid, group := pooled[0].hp.pid, pooled[0].cgroup.Path()
	want := cgroups.Limits{Pids: 37, MemoryBytes: 300 << 20}
	var seen []byte
	var once sync.Once
	ready := make(chan struct{})
	h, err := r.Start(context.Background(), Spec{
		Argv:      []string{"/bin/sh", "-c", `grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; ls /proc | grep -c '^[0-9]'; echo end; exec sleep 60`},
		Resources: want,
		OnOutput: func(b []byte) {
			seen = append(seen, b...)
			if strings.Contains(string(seen), "end\n") {
				once.Do(func() { close(ready) })
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	<-ready
	// The group the pre-started helper sits in enforces the command's limit now.
	pidsMax := "/sys/fs/cgroup/" + group + "/pids.max"
	if m.Mode() == cgroups.ModeV1 {
		pidsMax = "/sys/fs/cgroup/pids/" + group + "/pids.max"
	}
	got, rerr := os.ReadFile(pidsMax)
	h.Kill(OriginCancel)
	res, err := h.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if rerr != nil || strings.TrimSpace(string(got)) != "37" {
		t.Errorf("%s = %q (%v), want 37", pidsMax, got, rerr)
	}
	out := string(res.Output)
	if res.Pid != helperPid {
		t.Fatalf("pid %d, want the pre-started helper %d: %q", res.Pid, helperPid, out)
	}
	// No capability, no_new_privs, and /proc shows the sandbox's own processes only
	// (helper, shell, grep/ls: a handful, not the host's).
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || lines[0] != "CapEff:\t0000000000000000" || lines[1] != "NoNewPrivs:\t1" {
		t.Fatalf("output %q", out)
	}
	if n, _ := strconv.Atoi(lines[2]); n < 1 || n > 5 {
		t.Errorf("/proc lists %s processes inside the sandbox", lines[2])
	}
	if res.Cgroup == nil || res.Cgroup.Limits != want || !res.Cgroup.Removed {
		t.Fatalf("cgroup report %+v, want limits %+v and the group removed", res.Cgroup, want)
	}
	if !res.CleanupComplete || res.SignalOrigin != OriginCancel {
		t.Errorf("cleanup incomplete: %+v", res)
	}
	// The helper served once: it is gone, and the pool refills with a new process.
	if err := syscall.Kill(helperPid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pre-started helper %d still exists after its command: %v", helperPid, err)
	}
}

// TestPrestartedSandboxDeadHelperDiscarded: an idle helper killed from outside is never
// handed a command; the command starts a fresh sandbox and runs.
func TestPrestartedSandboxDeadHelperDiscarded(t *testing.T) {
	r, _ := prestartedRunner(t, 1)
	ps := idlePooled(r)[0]
	if err := syscall.Kill(ps.hp.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := WaitExitNoReap(ps.hp.pid); err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background(), Spec{Argv: []string{"/bin/echo", "fresh"}})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Output)) != "fresh" || res.Pid == ps.hp.pid {
		t.Fatalf("exit %d pid %d (dead helper %d) output %q: %v", res.ExitCode, res.Pid, ps.hp.pid, res.Output, err)
	}
}

// TestPrestartedSandboxClose: Close discards idle helpers and their groups.
func TestPrestartedSandboxClose(t *testing.T) {
	r, m := prestartedRunner(t, 2)
	pooled := idlePooled(r)
	r.Close()
	for _, ps := range pooled {
		if _, err := os.Stat("/proc/" + strconv.Itoa(ps.hp.pid)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("helper %d survives Close: %v", ps.hp.pid, err)
		}
	}
	names, err := m.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 {
		t.Errorf("groups left after Close: %v", names)
	}
}

// TestPrestartedSandboxRefillsOnlyWhenIdle: the pool never starts a helper while a command
// is starting (a refill would compete with it); the command's end refills it.
func TestPrestartedSandboxRefillsOnlyWhenIdle(t *testing.T) {
	r, _ := prestartedRunner(t, 1)
	// Both counts in one read: read apart, a refill ending between them looks like none.
	filling := r.pool.Counts
	// The command takes the one idle helper; while it is starting (held in BeforeExec) a
	// refill is asked for and must not begin.
	h, err := r.Start(context.Background(), Spec{Argv: []string{"/bin/true"}, BeforeExec: func() error {
		r.pool.Refill()
		if idle, f := filling(); idle != 0 || f != 0 {
			t.Errorf("during a start the pool refilled: %d idle, %d filling", idle, f)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := h.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("command: %v %+v", err, res)
	}
	// Idle again: the command's release refilled the pool (in the background).
	for idle, f := filling(); idle != 1; idle, f = filling() {
		if f == 0 && idle == 0 {
			t.Fatal("the pool did not refill after the command ended")
		}
		runtime.Gosched()
	}
}

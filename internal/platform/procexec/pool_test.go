package procexec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// helperPool is a Pool of real waiting sandbox helpers (the slim helper binary).
func helperPool(t *testing.T, size int, busy *atomic.Bool) *Pool[*helperProc] {
	t.Helper()
	requireSandbox(t)
	helper := slimHelper(t)
	p := NewPool(PoolOptions[*helperProc]{
		Size:    size,
		Start:   func() (*helperProc, error) { return startHelper(StartOptions{HelperPath: helper}) },
		Discard: (*helperProc).discard,
		Alive: func(hp *helperProc) bool {
			st, err := ReadStat(hp.pid)
			return err == nil && st.State != 'Z' && st.State != 'X'
		},
		Busy: busy.Load,
	})
	t.Cleanup(p.Close)
	return p
}

func pidsOf(hs []*helperProc) []int {
	out := make([]int, len(hs))
	for i, hp := range hs {
		out[i] = hp.pid
	}
	return out
}

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// TestPoolTakesOnceRefillsWhenIdleAndCloses: the pool is bounded; a take hands out a
// waiting helper once (what is taken never comes back, the refill starts new processes);
// no refill begins while a start is in progress; a helper that died while it waited is
// discarded, never handed out; Close kills what waits and the pool stays empty after.
func TestPoolTakesOnceRefillsWhenIdleAndCloses(t *testing.T) {
	if got := NewPool(PoolOptions[int]{Size: 1 << 20}).Size(); got != MaxPoolSize {
		t.Fatalf("pool size %d, want the bound %d", got, MaxPoolSize)
	}
	if NewPool(PoolOptions[int]{Size: -1}) != nil {
		t.Fatal("a negative size must turn the pool off")
	}
	var busy atomic.Bool
	p := helperPool(t, 2, &busy)
	if err := p.Warm(); err != nil {
		t.Fatal(err)
	}
	first := pidsOf(p.Idle())
	if len(first) != 2 || first[0] == first[1] {
		t.Fatalf("warm pool holds %v, want two helpers", first)
	}
	a, okA := p.Take()
	b, okB := p.Take()
	if !okA || !okB || a.pid != first[0] || b.pid != first[1] {
		t.Fatalf("took %v %v, want the waiting helpers %v in order", okA, okB, first)
	}
	if _, ok := p.Take(); ok {
		t.Fatal("an empty pool handed out a helper")
	}
	// A start is in progress: a refill asked for now must not begin.
	busy.Store(true)
	p.Refill()
	if idle, f := len(p.Idle()), p.Filling(); idle != 0 || f != 0 {
		t.Fatalf("the pool refilled during a start: %d idle, %d filling", idle, f)
	}
	busy.Store(false)
	p.Refill()
	if err := p.Warm(); err != nil {
		t.Fatal(err)
	}
	second := pidsOf(p.Idle())
	for _, pid := range second {
		if pid == a.pid || pid == b.pid {
			t.Fatalf("the refill handed out taken helper %d again (pool %v)", pid, second)
		}
	}
	a.discard()
	b.discard()
	// A helper killed while it waits is discarded at take, and the next one is handed out.
	dead := p.Idle()[0]
	if err := syscall.Kill(dead.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := WaitExitNoReap(dead.pid); err != nil {
		t.Fatal(err)
	}
	c, ok := p.Take()
	if !ok || c.pid != second[1] {
		t.Fatalf("took %v (ok %v) after the first helper died, want %d", c, ok, second[1])
	}
	c.discard()
	if !gone(dead.pid) {
		t.Errorf("the dead helper %d was not reaped", dead.pid)
	}
	// Close: what waits is killed and reaped; nothing is handed out or started after.
	if err := p.Warm(); err != nil {
		t.Fatal(err)
	}
	waiting := pidsOf(p.Idle())
	p.Close()
	for _, pid := range waiting {
		if !gone(pid) {
			t.Errorf("waiting helper %d survives Close", pid)
		}
	}
	p.Refill()
	if _, ok := p.Take(); ok || p.Filling() != 0 || len(p.Idle()) != 0 {
		t.Fatal("a closed pool handed out or started a helper")
	}
}

// TestPoolCloseDiscardsAnInFlightRefill: a helper whose start was in flight when the pool
// closed is killed, not left waiting.
func TestPoolCloseDiscardsAnInFlightRefill(t *testing.T) {
	requireSandbox(t)
	helper := slimHelper(t)
	started, release := make(chan int, 1), make(chan struct{})
	p := NewPool(PoolOptions[*helperProc]{
		Size: 1,
		Start: func() (*helperProc, error) {
			hp, err := startHelper(StartOptions{HelperPath: helper})
			if err == nil {
				started <- hp.pid
				<-release
			}
			return hp, err
		},
		Discard: (*helperProc).discard,
	})
	p.Refill()
	pid := <-started
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	close(release)
	<-closed
	if !gone(pid) || len(p.Idle()) != 0 {
		t.Fatalf("helper %d started during Close survives it (idle %d)", pid, len(p.Idle()))
	}
}

// TestPoolFailedStartBacksOff: a start that fails is reported by Warm and not retried by
// a refill before RetryAfter.
func TestPoolFailedStartBacksOff(t *testing.T) {
	var calls atomic.Int32
	boom := errors.New("no helper")
	p := NewPool(PoolOptions[int]{
		Size:       1,
		Start:      func() (int, error) { calls.Add(1); return 0, boom },
		Discard:    func(int) {},
		RetryAfter: time.Hour,
	})
	if err := p.Warm(); !errors.Is(err, boom) {
		t.Fatalf("Warm: %v, want the start's error", err)
	}
	p.Refill()
	if n := calls.Load(); n != 1 || p.Filling() != 0 {
		t.Fatalf("%d starts, %d filling: a refill retried within RetryAfter", n, p.Filling())
	}
}

const poolOrphanMode = "pool-orphan"

// poolOrphanChild fills a pool of two waiting helpers, prints their pids and waits to be
// killed (TestPoolHelperEndsWithItsAgent).
func poolOrphanChild() int {
	p := NewPool(PoolOptions[*helperProc]{
		Size: 2,
		Start: func() (*helperProc, error) {
			return startHelper(StartOptions{HelperPath: os.Getenv("PROCEXEC_TEST_HELPER")})
		},
		Discard: (*helperProc).discard,
	})
	if err := p.Warm(); err != nil {
		fmt.Println("err", err)
		return 1
	}
	var pids []string
	for _, pid := range pidsOf(p.Idle()) {
		pids = append(pids, strconv.Itoa(pid))
	}
	fmt.Println(strings.Join(pids, " "))
	select {} // until killed
}

// TestPoolHelperEndsWithItsAgent: when the process holding a pool dies (SIGKILL: no
// cleanup of its own), every waiting helper exits with the sandbox-setup failure, having
// run nothing — its configuration socket's other end is gone. The helpers are re-parented
// to this test binary (a subreaper), which reaps them and reads their exit status.
func TestPoolHelperEndsWithItsAgent(t *testing.T) {
	requireSandbox(t)
	cmd := exec.Command(selfExe(t))
	cmd.Env = []string{testModeEnv + "=" + poolOrphanMode, "PROCEXEC_TEST_HELPER=" + slimHelper(t), noRaceExitSleep}
	line, err := firstLine(t, cmd)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil || strings.HasPrefix(line, "err") {
		t.Fatalf("child: %q %v", line, err)
	}
	fields := strings.Fields(line)
	if len(fields) != 2 {
		t.Fatalf("child reported %q, want two helper pids", line)
	}
	for _, f := range fields {
		pid, _ := strconv.Atoi(f)
		done := reap(t, pid)
		select {
		case ws := <-done:
			if !ws.Exited() || ws.ExitStatus() != helperFailExit {
				t.Errorf("orphaned helper %d ended %v, want exit %d (setup failed, nothing run)", pid, ws, helperFailExit)
			}
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("helper %d still waits 10 s after the process holding its pool died", pid)
		}
	}
}

package waits

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"
)

var idleWindow = flag.Duration("waits.idle-window", 3*time.Second, "measurement window of TestPendingWaitsIdleCPU / BenchmarkPendingWaitsIdle")

// IdleReport is what measureIdleCPU observed.
type IdleReport struct {
	Waits      int
	Window     time.Duration
	CPU        time.Duration // user + system time of the whole test process
	Goroutines int
	HeapBytes  uint64
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureIdleCPU registers n pending waits on idle sources — half
// terminal.output.since on one silent /bin/cat session, half file.exists on
// files that never appear (inotify subscriptions sharing one directory
// watch) — lets them settle, then measures the process's CPU time over
// window. It asserts only that every wait stays pending.
func measureIdleCPU(t testing.TB, n int, window time.Duration) IdleReport {
	t.Helper()
	m := newManager(t)
	s := open(t, m, "/bin/cat")
	dir := t.TempDir()
	root := openRoot(t, dir)
	w := newWatcher(t, WatchCaps{MaxSubscriptions: n})
	e := newEngine(t, Caps{PendingWaits: n})
	src := SessionSource(s)
	since := s.Events().LastSeq()
	handles := make([]*Handle, 0, n)
	for i := 0; i < n; i++ {
		req := Request{ID: fmt.Sprintf("idle-%d", i), Deadline: deadline(time.Hour)}
		if i%2 == 0 {
			req.Kind, req.SinceSeq, req.Source = KindOutputSince, since, src
		} else {
			fs, err := w.Source(root, fmt.Sprintf("never-%d", i))
			must(t, err)
			req.Kind, req.Source = KindFileExists, fs
		}
		h, err := e.Register(context.Background(), req)
		must(t, err)
		handles = append(handles, h)
	}
	// Let the initial evaluations and the diagnostic re-check timers of the
	// session waits (2 s and 6 s after the last output, i.e. after session
	// start) mostly pass before measuring.
	time.Sleep(500 * time.Millisecond)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := cpuTime()
	time.Sleep(window)
	rep := IdleReport{Waits: n, Window: window, CPU: cpuTime() - before, Goroutines: runtime.NumGoroutine(), HeapBytes: ms.HeapAlloc}
	if p := e.Pending(); p != n {
		t.Fatalf("%d of %d waits still pending after the window", p, n)
	}
	for _, h := range handles[:4] {
		if _, n := h.Last(); n > 4 {
			t.Fatalf("idle wait %s evaluated %d times", h.ID(), n)
		}
	}
	return rep
}

// TestPendingWaitsIdleCPU reports (never asserts) the CPU cost of 1,000
// pending waits on idle sources. Window: -waits.idle-window (default 3 s).
func TestPendingWaitsIdleCPU(t *testing.T) {
	rep := measureIdleCPU(t, DefaultPendingWaits, *idleWindow)
	t.Logf("%d pending waits idle for %s: process CPU %s (%.3f%% of one core), %d goroutines, heap %.1f MiB",
		rep.Waits, rep.Window, rep.CPU, 100*rep.CPU.Seconds()/rep.Window.Seconds(), rep.Goroutines, float64(rep.HeapBytes)/(1<<20))
}

// BenchmarkPendingWaitsIdle reports the same as metrics (run with
// -bench PendingWaitsIdle -benchtime 1x).
func BenchmarkPendingWaitsIdle(b *testing.B) {
	var rep IdleReport
	for b.Loop() {
		rep = measureIdleCPU(b, DefaultPendingWaits, *idleWindow)
	}
	b.ReportMetric(float64(rep.CPU.Microseconds())/rep.Window.Seconds(), "cpu-µs/s")
	b.ReportMetric(float64(rep.Goroutines), "goroutines")
	b.ReportMetric(float64(rep.HeapBytes)/(1<<20), "heap-MiB")
}

package procexec

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkSandboxHelperCPU measures the CPU one sandboxed /bin/true costs the machine
// outside the caller: the helper (runtime start, namespaces, mounts, Landlock, seccomp,
// supervising) and the program, read from RUSAGE_CHILDREN around serial starts, next to
// a bare fork/exec's children CPU measured the same way in the same run. The caller's
// own CPU for the start (clone, idmapped mounts, configuration) is reported apart.
func BenchmarkSandboxHelperCPU(b *testing.B) {
	requireSandbox(b)
	helper := os.Getenv("PROCEXEC_BENCH_HELPER") // a built helper to profile (perf needs its file)
	if helper == "" {
		helper = slimHelper(b)
	}
	r := NewRunner(Limits{HelperPath: helper})
	// PROCEXEC_BENCH_BALLAST_MB: a heap of that size, touched, held by the caller during the
	// starts: the node agent is a large process, and the helper is cloned into a new user
	// namespace, which Go does with a full fork (no CLONE_VM), copying the caller's page
	// tables and leaving its pages copy-on-write.
	var ballast [][]byte
	if mb, _ := strconv.Atoi(os.Getenv("PROCEXEC_BENCH_BALLAST_MB")); mb > 0 {
		for range mb {
			chunk := make([]byte, 1<<20)
			for i := 0; i < len(chunk); i += 4096 {
				chunk[i] = 1
			}
			ballast = append(ballast, chunk)
		}
	}
	ctx := context.Background()
	children := func() (time.Duration, time.Duration) {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &ru)
		return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
	}
	self := func() time.Duration {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	n := 0
	u0, s0 := children()
	p0 := self()
	for b.Loop() {
		res, err := r.Run(ctx, Spec{Argv: []string{"/bin/true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		n++
	}
	runtime.KeepAlive(ballast)
	u1, s1 := children()
	p1 := self()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	b.ReportMetric(ms(u1-u0), "helper-user-ms/op")
	b.ReportMetric(ms(s1-s0), "helper-sys-ms/op")
	b.ReportMetric(ms(p1-p0), "caller-ms/op")
}

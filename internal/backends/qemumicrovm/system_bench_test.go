package qemumicrovm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/loopdisk"
)

// vmSystemEnv is the full-system variant `make guest-image` built (bin/guest-system),
// skipping without it.
func vmSystemEnv(t testing.TB) (imageDir string, img *backends.BootImage) {
	t.Helper()
	imageDir, _ = vmEnv(t) // QEMU, the vsock device, the architecture
	f, err := os.Open(filepath.Join(imageDir, "guest-system", "digests.txt"))
	if err != nil {
		t.Skipf("the full-system image is not built (run `make guest-image`): %v", err)
	}
	defer func() { _ = f.Close() }()
	img = &backends.BootImage{Variant: "full-system"}
	readDigests(t, f, img)
	if img.DiskPath == "" || img.KernelPath == "" {
		t.Fatalf("incomplete %s", f.Name())
	}
	return imageDir, img
}

// BenchmarkSystemBootToAgentReady: Allocate of the full-system variant (working-disk
// clone, digest checks, record, systemd boot, agent handshake, roots) → ready, p50 over
// WORKBENCH_BENCH_BOOTS boots (default 3: one boot is about a minute under TCG), against
// the floor of a bare QEMU boot of the same kernel, initrd, disk image (a private copy
// made before the clock starts) and command line, interleaved in the same run.
func BenchmarkSystemBootToAgentReady(b *testing.B) {
	imageDir, img := vmSystemEnv(b)
	cfg := testConfig(b, imageDir)
	cfg.Disks = loopdisk.NewPool(filepath.Join(cfg.StateDir, DisksDir), 64<<30)
	bk, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	boots := envCount("WORKBENCH_BENCH_BOOTS", 3)
	var full, floor []time.Duration
	for i := 0; i < b.N; i++ {
		for j := 0; j < boots; j++ {
			floor = append(floor, bareBoot(b, bk, img, filepath.Join(cfg.StateDir, "floor")))
			spec := testSpec(fmt.Sprintf("sys-%d-%d", i, j), img)
			t0 := time.Now()
			if _, err := bk.Allocate(context.Background(), spec); err != nil {
				b.Fatal(err)
			}
			full = append(full, time.Since(t0))
			if _, err := bk.Teardown(context.Background(), spec); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(msOf(p50(full)), "p50-ready-ms")
	b.ReportMetric(msOf(p50(floor)), "p50-floor-ms")
	b.ReportMetric(float64(p50(full))/float64(p50(floor)), "ratio-to-floor")
	b.ReportMetric(float64(len(full)), "boots")
	b.Logf("full-system accel=tcg boots=%d ready p50 %v (min %v max %v), bare QEMU floor p50 %v (min %v max %v)", len(full),
		p50(full).Round(time.Millisecond), slices.Min(full).Round(time.Millisecond), slices.Max(full).Round(time.Millisecond),
		p50(floor).Round(time.Millisecond), slices.Min(floor).Round(time.Millisecond), slices.Max(floor).Round(time.Millisecond))
}

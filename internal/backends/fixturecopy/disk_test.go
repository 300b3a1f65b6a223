package fixturecopy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fixture"
	"sensorium.dev/workbench/internal/platform/loopdisk"
)

func requireDisks(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("per-environment disks need root (loop devices, mounts); CI runs as root")
	}
	if err := loopdisk.Check(); err != nil {
		t.Skipf("this machine cannot make loop disks: %v", err)
	}
}

// newDiskEnv is newEnv with per-environment disks: a reservation of capacity bytes and a
// default disk of 32 MiB. Whatever a test leaves is released at its end.
func newDiskEnv(t *testing.T, capacity int64) *env {
	t.Helper()
	requireDisks(t)
	e := newEnv(t, fixture.Limits{})
	e.withDisks(capacity)
	t.Cleanup(func() { ReleaseDisks(e.state) })
	return e
}

func (e *env) withDisks(capacity int64) {
	e.b.WithDisks(Disks{Pool: loopdisk.NewPool(filepath.Join(e.b.stateDir, DisksDir), capacity), DefaultBytes: 32 << 20})
}

// diskLeftovers lists mounts and loop devices of the state dir's disks.
func diskLeftovers(t *testing.T, state string) []string {
	t.Helper()
	real, err := filepath.EvalSymlinks(state)
	if err != nil {
		real = state
	}
	loops, err := loopdisk.LoopsBackedBy(filepath.Join(real, DisksDir))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := loopdisk.MountsUnder(real)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		loops = append(loops, m.Point)
	}
	return loops
}

func fill(dir string) (int64, error) {
	f, err := os.Create(filepath.Join(dir, "flood"))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	buf := bytes.Repeat([]byte{1}, 1<<20)
	var n int64
	for range 1 << 10 {
		w, err := f.Write(buf)
		n += int64(w)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestDiskBoundsTheCopyAndTearsDown: the copy lives on the environment's own disk
// (mounted nosuid,nodev at the environment directory); a write past its size fails with
// ENOSPC while the state filesystem is untouched; Teardown leaves no mount, loop device,
// image or directory.
func TestDiskBoundsTheCopyAndTearsDown(t *testing.T) {
	e := newDiskEnv(t, 1<<30)
	spec := e.spec("env-1", backends.Root{Name: "src", Source: filepath.Join(e.admitted, "proj")})
	st, err := e.b.Allocate(context.Background(), spec)
	if err != nil || st.Phase != backends.PhaseReady {
		t.Fatalf("allocate: %v %+v", err, st)
	}
	copyDir := st.Roots[0].Path
	if b, err := os.ReadFile(filepath.Join(copyDir, "a.txt")); err != nil || string(b) != "alpha\n" {
		t.Fatalf("copy: %q %v", b, err)
	}
	var sfs syscall.Statfs_t
	must(t, syscall.Statfs(copyDir, &sfs))
	if sfs.Flags&(0x2|0x4) != 0x2|0x4 || int64(sfs.Blocks)*sfs.Bsize > 32<<20 {
		t.Fatalf("copy not on a 32 MiB nosuid,nodev disk: flags %#x size %d", sfs.Flags, int64(sfs.Blocks)*sfs.Bsize)
	}
	n, err := fill(copyDir)
	if !errors.Is(err, syscall.ENOSPC) || n >= 32<<20 {
		t.Fatalf("flood wrote %d bytes: %v, want ENOSPC below 32 MiB", n, err)
	}
	// The environment is still served (Inspect reads its record on the full disk).
	if st, err := e.b.Inspect(context.Background(), spec); err != nil || st.Phase != backends.PhaseReady {
		t.Fatalf("inspect on a full disk: %v %+v", err, st)
	}
	st, err = e.b.Teardown(context.Background(), spec)
	if err != nil || st.Phase != backends.PhaseClosed || len(st.Residue) > 0 {
		t.Fatalf("teardown: %v %+v", err, st)
	}
	if l := diskLeftovers(t, e.state); len(l) > 0 {
		t.Fatalf("left after teardown: %v", l)
	}
	for _, p := range []string{filepath.Join(e.b.Dir(), "env-1"), filepath.Join(e.b.stateDir, DisksDir, "env-1.img")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left: %v", p, err)
		}
	}
}

// TestDiskHonoursDiskMiB: resources.diskMiB is the disk's size; a source larger than it
// is refused fixture-too-large and nothing stays reserved; one below the minimum is
// resources-invalid.
func TestDiskHonoursDiskMiB(t *testing.T) {
	e := newDiskEnv(t, 1<<30)
	spec := e.spec("env-mib", backends.Root{Name: "src", Source: filepath.Join(e.admitted, "proj")})
	spec.DiskMiB = 20
	st, err := e.b.Allocate(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	var sfs syscall.Statfs_t
	must(t, syscall.Statfs(st.Roots[0].Path, &sfs))
	if size := int64(sfs.Blocks) * sfs.Bsize; size > 20<<20 || size < 12<<20 {
		t.Fatalf("disk of %d bytes for diskMiB 20", size)
	}
	if used, capacity, n, err := e.b.Storage(); err != nil || used != 20<<20 || capacity != 1<<30 || n != 1 {
		t.Fatalf("storage %d %d %d %v", used, capacity, n, err)
	}
	_, _ = e.b.Teardown(context.Background(), spec)

	big := filepath.Join(e.admitted, "big")
	must(t, os.MkdirAll(big, 0o755))
	must(t, os.WriteFile(filepath.Join(big, "blob"), bytes.Repeat([]byte{7}, 24<<20), 0o644))
	spec = e.spec("env-big", backends.Root{Name: "src", Source: big})
	spec.DiskMiB = 16
	_, err = e.b.Allocate(context.Background(), spec)
	if actuation.CodeOf(err) != actuation.CodeFixtureTooLarge {
		t.Fatalf("a source larger than the disk: %v", err)
	}
	if used, _, _, _ := e.b.Storage(); used != 0 {
		t.Fatalf("a refused allocation keeps %d bytes reserved", used)
	}
	spec.ID, spec.DiskMiB = "env-small", 8
	if _, err := e.b.Allocate(context.Background(), spec); actuation.CodeOf(err) != actuation.CodeResourcesInvalid {
		t.Fatalf("diskMiB 8: %v", err)
	}
	_, _ = e.b.Teardown(context.Background(), e.spec("env-big"))
	_, _ = e.b.Teardown(context.Background(), e.spec("env-small"))
	if l := diskLeftovers(t, e.state); len(l) > 0 {
		t.Fatalf("left: %v", l)
	}
}

// TestDiskReservationExhausted: a second environment whose disk would take the node past
// its reservation is refused storage-exhausted; the first keeps working; once it is torn
// down the second fits.
func TestDiskReservationExhausted(t *testing.T) {
	e := newDiskEnv(t, 48<<20)
	a := e.spec("env-a", backends.Root{Name: "src", Source: filepath.Join(e.admitted, "proj")})
	b := e.spec("env-b", backends.Root{Name: "src", Source: filepath.Join(e.admitted, "other")})
	if _, err := e.b.Allocate(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	st, err := e.b.Allocate(context.Background(), b)
	if actuation.CodeOf(err) != actuation.CodeStorageExhausted || st.Phase != backends.PhaseFailed ||
		!strings.Contains(err.Error(), "reservation") {
		t.Fatalf("overcommit: %v %+v", err, st)
	}
	if st, err := e.b.Inspect(context.Background(), a); err != nil || st.Phase != backends.PhaseReady {
		t.Fatalf("first environment: %v %+v", err, st)
	}
	if _, err := e.b.Teardown(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Allocate(context.Background(), b); err != nil {
		t.Fatalf("after the first's teardown: %v", err)
	}
	_, _ = e.b.Teardown(context.Background(), b)
}

// TestDiskRecoverAfterCrash: a new backend over the same state directory (the agent
// restarted) sweeps the disk of an environment the store no longer knows (unmounted,
// loop device detached, image and directory deleted), keeps a known one, and mounts a
// known disk again when it is not mounted (after a reboot), so its copy is recovered.
func TestDiskRecoverAfterCrash(t *testing.T) {
	e := newDiskEnv(t, 1<<30)
	known := e.spec("env-known", backends.Root{Name: "src", Source: filepath.Join(e.admitted, "proj")})
	gone := e.spec("env-gone", backends.Root{Name: "src", Source: filepath.Join(e.admitted, "other")})
	for _, s := range []backends.Spec{known, gone} {
		if _, err := e.b.Allocate(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	// A reboot unmounted the known disk.
	must(t, loopdisk.Unmount(filepath.Join(e.b.Dir(), "env-known")))

	e.b = New(e.state, map[string]string{"ws": e.admitted}, fixture.Limits{})
	e.withDisks(1 << 30)
	acts, err := e.b.Recover(context.Background(), map[string]backends.Spec{"env-known": known})
	if err != nil {
		t.Fatal(err)
	}
	var recovered bool
	for _, a := range acts {
		if strings.Contains(a.Resource, "env-known") && a.Outcome == "recovered" && strings.Contains(a.Resource, "fx-") {
			recovered = true
		}
		if a.Outcome == "failed-retryable" {
			t.Errorf("recovery action failed: %+v", a)
		}
	}
	if !recovered {
		t.Fatalf("the known copy was not recovered: %+v", acts)
	}
	st, err := e.b.Inspect(context.Background(), known)
	if err != nil || st.Phase != backends.PhaseReady {
		t.Fatalf("known environment after recovery: %v %+v", err, st)
	}
	for _, p := range []string{filepath.Join(e.b.Dir(), "env-gone"), filepath.Join(e.b.stateDir, DisksDir, "env-gone.img")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left by the sweep: %v", p, err)
		}
	}
	if _, err := e.b.Teardown(context.Background(), known); err != nil {
		t.Fatal(err)
	}
	if l := diskLeftovers(t, e.state); len(l) > 0 {
		t.Fatalf("left: %v", l)
	}
}

// TestDiskUnavailableRefuses: a node that cannot make disks refuses the allocation
// (resource-not-enforced) instead of copying unbounded.
func TestDiskUnavailableRefuses(t *testing.T) {
	e := newEnv(t, fixture.Limits{})
	e.b.WithDisks(Disks{Unavailable: "no loop devices"})
	_, err := e.b.Allocate(context.Background(), e.spec("env-x", backends.Root{Name: "src", Source: filepath.Join(e.admitted, "proj")}))
	if actuation.CodeOf(err) != actuation.CodeResourceNotEnforced {
		t.Fatalf("allocate without disks: %v", err)
	}
}

// TestDiskAdoptMovesTheDisk: a pool member's disk goes to its claimer whole (its writes
// included), still nosuid,nodev, counted once; the member's mount point is gone, and the
// claimer's teardown leaves nothing.
func TestDiskAdoptMovesTheDisk(t *testing.T) {
	e := newDiskEnv(t, 1<<30)
	member := e.spec("member", backends.Root{Name: "src", Source: filepath.Join(e.admitted, "proj")})
	claimer := e.spec("claimer", backends.Root{Name: "src", Source: filepath.Join(e.admitted, "proj")})
	st, err := e.b.Allocate(context.Background(), member)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(st.Roots[0].Path, "member.txt"), []byte("m"), 0o644))
	// A descriptor held on the member's copy (a pin) does not stop the move.
	held, err := os.Open(st.Roots[0].Path)
	must(t, err)
	defer func() { _ = held.Close() }()
	must(t, e.b.Adopt(context.Background(), member, claimer))
	st, err = e.b.Allocate(context.Background(), claimer)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(st.Roots[0].Path, "member.txt")); err != nil || string(b) != "m" {
		t.Fatalf("the claimer's copy is not the member's: %q %v", b, err)
	}
	var sfs syscall.Statfs_t
	must(t, syscall.Statfs(st.Roots[0].Path, &sfs))
	if sfs.Flags&(0x2|0x4) != 0x2|0x4 {
		t.Fatalf("adopted disk not nosuid,nodev: %#x", sfs.Flags)
	}
	if _, err := os.Lstat(filepath.Join(e.b.Dir(), "member")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("member directory left: %v", err)
	}
	if used, _, n, err := e.b.Storage(); err != nil || n != 1 || used != 32<<20 {
		t.Fatalf("storage after adoption: %d %d %v", used, n, err)
	}
	_ = held.Close()
	if _, err := e.b.Teardown(context.Background(), claimer); err != nil {
		t.Fatal(err)
	}
	if l := diskLeftovers(t, e.state); len(l) > 0 {
		t.Fatalf("left: %v", l)
	}
}

// BenchmarkAllocateWithDisk measures Allocate+Teardown of a small fixture-copy
// environment two ways, interleaved sample by sample: copies on the state filesystem (no
// disk, as before per-environment disks) and on a disk of its own (image, mkfs.ext4, loop
// device, mount; teardown unmounts and deletes). It reports p50/p99 of each.
func BenchmarkAllocateWithDisk(b *testing.B) {
	if os.Geteuid() != 0 || loopdisk.Check() != nil {
		b.Skip("needs root and loop devices")
	}
	dir := b.TempDir()
	src := filepath.Join(dir, "admitted", "proj")
	must(b, os.MkdirAll(filepath.Join(src, "sub"), 0o755))
	for i := range 50 {
		must(b, os.WriteFile(filepath.Join(src, "sub", "f"+strconv.Itoa(i)), bytes.Repeat([]byte{'x'}, 4096), 0o644))
	}
	plain := New(filepath.Join(dir, "state-plain"), map[string]string{"ws": filepath.Join(dir, "admitted")}, fixture.Limits{})
	disk := New(filepath.Join(dir, "state-disk"), map[string]string{"ws": filepath.Join(dir, "admitted")}, fixture.Limits{})
	disk.WithDisks(Disks{Pool: loopdisk.NewPool(filepath.Join(disk.stateDir, DisksDir), 1<<30), DefaultBytes: 64 << 20})
	b.Cleanup(func() { ReleaseDisks(filepath.Join(dir, "state-disk")) })
	ctx := context.Background()
	var plainA, diskA, plainT, diskT []time.Duration
	n := 0
	for b.Loop() {
		n++
		spec := backends.Spec{ID: "env-" + strconv.Itoa(n), Ref: "ns/e", Roots: []backends.Root{{Name: "src", Source: src}}}
		for _, s := range []struct {
			b      *Backend
			at, tt *[]time.Duration
		}{{plain, &plainA, &plainT}, {disk, &diskA, &diskT}} {
			t0 := time.Now()
			if _, err := s.b.Allocate(ctx, spec); err != nil {
				b.Fatal(err)
			}
			*s.at = append(*s.at, time.Since(t0))
			t0 = time.Now()
			if _, err := s.b.Teardown(ctx, spec); err != nil {
				b.Fatal(err)
			}
			*s.tt = append(*s.tt, time.Since(t0))
		}
	}
	q := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(plainA, 0.5), "allocate-plain-p50-ms")
	b.ReportMetric(q(plainA, 0.99), "allocate-plain-p99-ms")
	b.ReportMetric(q(diskA, 0.5), "allocate-disk-p50-ms")
	b.ReportMetric(q(diskA, 0.99), "allocate-disk-p99-ms")
	b.ReportMetric(q(plainT, 0.5), "teardown-plain-p50-ms")
	b.ReportMetric(q(diskT, 0.5), "teardown-disk-p50-ms")
}

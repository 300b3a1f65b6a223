package loopdisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/testkit"
)

func requireLoop(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop devices and mounts need root (CI runs as root)")
	}
	if err := Check(); err != nil {
		t.Skipf("this machine cannot make loop disks: %v", err)
	}
}

// leftovers lists what of pool p is still attached or mounted anywhere.
func leftovers(t *testing.T, p *Pool) []string {
	t.Helper()
	var out []string
	loops, err := LoopsBackedBy(p.Dir())
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, loops...)
	ms, err := MountsUnder("/")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if strings.HasPrefix(strings.TrimSuffix(BackingFile(m.Source), " (deleted)"), p.Dir()+"/") {
			out = append(out, m.Point)
		}
	}
	return out
}

// noLeftovers waits, bounded, until p has no loop device or mount left: the kernel
// detaches an autoclear loop device in a work item after its last holder goes (a lazy
// unmount, a descriptor closed), not inside the call that dropped the reference.
func noLeftovers(t *testing.T, p *Pool, when string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "no loop device or mount left "+when, func() (bool, string) {
		l := leftovers(t, p)
		return len(l) == 0, fmt.Sprint(l)
	})
}

func newPool(t *testing.T, capacity int64) (*Pool, string) {
	t.Helper()
	base := t.TempDir()
	p := NewPool(filepath.Join(base, "disks"), capacity)
	t.Cleanup(func() {
		p.Sweep(filepath.Join(base, "mnt"), func(string) bool { return false })
	})
	if err := os.MkdirAll(filepath.Join(base, "mnt"), 0o700); err != nil {
		t.Fatal(err)
	}
	return p, filepath.Join(base, "mnt")
}

// TestDiskBoundsWritesAndTearsDownClean: a write past the disk's size fails with ENOSPC
// inside it (and the image never grows past its size on the state filesystem); Release
// leaves no mount, no loop device and no image.
func TestDiskBoundsWritesAndTearsDownClean(t *testing.T) {
	requireLoop(t)
	p, mnt := newPool(t, 1<<30)
	dir := filepath.Join(mnt, "env-a")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	created, err := p.Ensure(context.Background(), "env-a", 32<<20, dir)
	if err != nil || !created {
		t.Fatalf("Ensure: created=%v err=%v", created, err)
	}
	if ok, err := p.Mounted("env-a", dir); !ok || err != nil {
		t.Fatalf("not mounted: %v %v", ok, err)
	}
	// Idempotent: mounted already.
	if created, err := p.Ensure(context.Background(), "env-a", 32<<20, dir); err != nil || created {
		t.Fatalf("second Ensure: created=%v err=%v", created, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Fatalf("a fresh disk is not empty: %v", ents)
	}
	ms, _ := MountsUnder(dir)
	if len(ms) != 1 || ms[0].FSType != FSType {
		t.Fatalf("mounts at %s: %+v", dir, ms)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Flags&(0x2|0x4) != 0x2|0x4 { // ST_NOSUID|ST_NODEV
		t.Fatalf("disk not mounted nosuid,nodev: flags %#x err %v", st.Flags, err)
	}
	f, err := os.Create(filepath.Join(dir, "flood"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var written int64
	for range 64 {
		n, err := f.Write(buf)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write past the bound: %v, want ENOSPC", err)
			}
			break
		}
	}
	_ = f.Close()
	if written >= 32<<20 || written < 16<<20 {
		t.Fatalf("wrote %d bytes on a 32 MiB disk", written)
	}
	if fi, err := os.Stat(p.Image("env-a")); err != nil || fi.Size() != 32<<20 {
		t.Fatalf("image %v %v", fi, err)
	}
	if err := p.Release("env-a", dir); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, p, "after Release")
	if _, err := os.Stat(p.Image("env-a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("image left: %v", err)
	}
	if err := p.Release("env-a", dir); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}

// TestPoolReservationRefuses: the sum of disk sizes may not pass the capacity; the
// refusal is storage-exhausted and makes nothing; releasing a disk frees its share.
func TestPoolReservationRefuses(t *testing.T) {
	requireLoop(t)
	p, mnt := newPool(t, 80<<20)
	mk := func(id string) string {
		d := filepath.Join(mnt, id)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := mk("a"), mk("b")
	if _, err := p.Ensure(context.Background(), "a", 48<<20, a); err != nil {
		t.Fatal(err)
	}
	_, err := p.Ensure(context.Background(), "b", 48<<20, b)
	if actuation.CodeOf(err) != actuation.CodeStorageExhausted {
		t.Fatalf("overcommit: %v, want %s", err, actuation.CodeStorageExhausted)
	}
	if _, err := os.Stat(p.Image("b")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused disk left an image: %v", err)
	}
	if used, n, err := p.Usage(); err != nil || used != 48<<20 || n != 1 {
		t.Fatalf("usage %d %d %v", used, n, err)
	}
	if err := p.Release("a", a); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ensure(context.Background(), "b", 48<<20, b); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

// TestSweepRemovesLeftovers: what an agent that died left (a mounted disk of an unknown
// environment, a stray image, a kept one) is swept: the unknown disk is unmounted and
// deleted, its loop device gone; the kept one stays mounted.
func TestSweepRemovesLeftovers(t *testing.T) {
	requireLoop(t)
	p, mnt := newPool(t, 1<<30)
	keepDir, goneDir := filepath.Join(mnt, "keep"), filepath.Join(mnt, "gone")
	for _, d := range []string{keepDir, goneDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for id, d := range map[string]string{"keep": keepDir, "gone": goneDir} {
		if _, err := p.Ensure(context.Background(), id, 16<<20, d); err != nil {
			t.Fatal(err)
		}
	}
	// A descriptor held open on the unknown disk (as a sandbox or a pin would): the
	// sweep still detaches it, the loop device goes when the holder does.
	held, err := os.Open(goneDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.Dir(), "stray.img.tmp"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	acts := p.Sweep(mnt, func(id string) bool { return id == "keep" })
	for _, a := range acts {
		if !a.Removed {
			t.Errorf("sweep failed: %+v", a)
		}
	}
	_ = held.Close()
	if ok, err := p.Mounted("keep", keepDir); !ok || err != nil {
		t.Fatalf("kept disk unmounted: %v %v", ok, err)
	}
	if ok, _ := p.Mounted("gone", goneDir); ok {
		t.Fatal("unknown disk still mounted")
	}
	ents, _ := os.ReadDir(p.Dir())
	if len(ents) != 1 || ents[0].Name() != "keep.img" {
		t.Fatalf("pool after sweep: %v", ents)
	}
	if err := p.Release("keep", keepDir); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, p, "after the sweep and release")
}

func TestParseMountinfo(t *testing.T) {
	m, ok := parseMountinfo(`36 35 98:0 / /mnt/a\040b rw,noatime master:1 - ext4 /dev/loop3 rw,errors=continue`)
	if !ok || m.Point != "/mnt/a b" || m.FSType != "ext4" || m.Source != "/dev/loop3" {
		t.Fatalf("%+v %v", m, ok)
	}
	if _, ok := parseMountinfo("garbage"); ok {
		t.Fatal("garbage parsed")
	}
}

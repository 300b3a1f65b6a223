package loopdisk

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// A sparse base: data at 0 and at 8 MiB, a hole between, 16 MiB long.
func sparseBase(t *testing.T) (*os.File, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "base.raw")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	a, b := bytes.Repeat([]byte("A"), 4096), bytes.Repeat([]byte("B"), 8192)
	if _, err := f.WriteAt(a, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, 8<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(16 << 20); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 16<<20)
	copy(want, a)
	copy(want[8<<20:], b)
	return f, want
}

func TestCloneCopiesTheBaseAndKeepsItsHoles(t *testing.T) {
	base, want := sparseBase(t)
	p := NewPool(t.TempDir(), 64<<20)
	created, method, err := p.Clone("env-1", base, 32<<20)
	if err != nil || !created {
		t.Fatalf("clone: created=%v err=%v", created, err)
	}
	got, err := os.ReadFile(p.Image("env-1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 32<<20 {
		t.Fatalf("clone is %d bytes, want the fixed virtual size %d", len(got), 32<<20)
	}
	if !bytes.Equal(got[:16<<20], want) || bytes.Count(got[16<<20:], []byte{0}) != 16<<20 {
		t.Fatal("the clone's bytes differ from the base's")
	}
	var st unix.Stat_t
	if err := unix.Stat(p.Image("env-1"), &st); err != nil {
		t.Fatal(err)
	}
	// Sparse or shared: far fewer blocks allocated than the 32 MiB it spans.
	if method == CloneSparse && st.Blocks*512 > 1<<20 {
		t.Fatalf("sparse clone allocates %d bytes", st.Blocks*512)
	}
	if st.Mode&0o777 != 0o600 {
		t.Fatalf("clone mode %o, want 0600", st.Mode&0o777)
	}
	// A second Clone keeps the existing image (a writable disk is never overwritten).
	if err := os.WriteFile(p.Image("env-1"), []byte("written by the guest"), 0o600); err != nil {
		t.Fatal(err)
	}
	if created, _, err := p.Clone("env-1", base, 32<<20); err != nil || created {
		t.Fatalf("second clone: created=%v err=%v", created, err)
	}
	if b, _ := os.ReadFile(p.Image("env-1")); string(b) != "written by the guest" {
		t.Fatal("the second Clone replaced the environment's disk")
	}
}

// One reservation across a pool and its sibling (fixture-copy disks and VM working disks):
// a clone that would pass it is refused before anything is written.
func TestCloneRefusedWhenTheSharedReservationIsExhausted(t *testing.T) {
	base, _ := sparseBase(t)
	fixture := NewPool(t.TempDir(), 48<<20)
	vms := fixture.Sibling(t.TempDir())
	if err := os.MkdirAll(fixture.Dir(), 0o700); err != nil {
		t.Fatal(err)
	}
	// A 24 MiB fixture disk (sparse file standing for it).
	if f, err := os.Create(fixture.Image("fx")); err != nil {
		t.Fatal(err)
	} else {
		_ = f.Truncate(24 << 20)
		_ = f.Close()
	}
	if _, _, err := vms.Clone("vm-1", base, 16<<20); err != nil {
		t.Fatalf("first clone (40 of 48 MiB): %v", err)
	}
	_, _, err := vms.Clone("vm-2", base, 16<<20)
	if actuation.CodeOf(err) != actuation.CodeStorageExhausted {
		t.Fatalf("second clone (56 of 48 MiB): err=%v, want %s", err, actuation.CodeStorageExhausted)
	}
	if _, err := os.Lstat(vms.Image("vm-2")); !os.IsNotExist(err) {
		t.Fatalf("a refused clone left an image: %v", err)
	}
	used, n, err := fixture.Usage()
	if err != nil || used != 40<<20 || n != 2 {
		t.Fatalf("usage seen from the fixture pool: %d bytes in %d disks (%v), want 40 MiB in 2", used, n, err)
	}
	if err := vms.Delete("vm-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := vms.Clone("vm-2", base, 16<<20); err != nil {
		t.Fatalf("clone after a delete freed the reservation: %v", err)
	}
}

package qemumicrovm

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/test/cgrouptest"
)

// TestVMMCgroup: the VMM's cgroup gets guest memory + overhead, pids and vCPUs+1 CPUs; a
// process started through startProc is born inside it; killAll's cgroup step kills what
// is left and removes the group; the capability claims host enforcement only with it.
func TestVMMCgroup(t *testing.T) {
	m := cgrouptest.Manager(t)
	b := &Backend{cfg: Config{Cgroups: m}}
	dir := filepath.Join(t.TempDir(), "env-uid-1")
	g, err := b.vmCgroup(dir, &Record{MemoryMiB: 256, VCPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	st, err := g.Stats()
	if err != nil || st.MemoryLimitBytes != (256+VMMOverheadMiB)<<20 || st.PidsLimit != VMMPids {
		t.Fatalf("limits %+v %v", st, err)
	}
	cmd := exec.Command("/bin/sleep", "300")
	cmd.WaitDelay = 10 * time.Second
	h, done, err := startProc(cmd, g, b.vmmIdentity(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if !g.Contains(cmd.Process.Pid) {
		t.Fatalf("pid %d not born in %s", cmd.Process.Pid, g.Path())
	}
	if left := b.removeVMCgroup(dir); len(left) != 0 {
		t.Fatalf("removeVMCgroup left %v", left)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the VMM process survived its cgroup's removal")
	}
	if _, err := m.Load(g.Name()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("group still there: %v", err)
	}
	if e := b.resourceEnforcement(); !slices.Contains(e, "host-memory") || !slices.Contains(e, "host-process") {
		t.Fatalf("enforcement %v", e)
	}
	if e := (&Backend{}).resourceEnforcement(); slices.Contains(e, "host-memory") {
		t.Fatalf("enforcement without cgroups %v", e)
	}
}

// Package cgrouptest gives the cgroup tests of several packages a cgroups manager under a
// parent unique to the test, removed when it ends, pass or fail. The storms such a test
// runs inside a group are package storm.
package cgrouptest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/platform/cgroups"
)

// Manager returns a cgroups manager whose groups live under a parent unique to the test.
// It skips the test without root or without usable cgroups. When the test ends, every
// group is swept and the parent removed in each hierarchy.
func Manager(t testing.TB) *cgroups.Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cgroups need root (CI runs as root)")
	}
	parent := fmt.Sprintf("workbench-test-%d-%s", os.Getpid(), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	m, err := cgroups.NewManager(cgroups.Config{Parent: parent})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Available() {
		t.Skipf("no usable cgroups here: %s", m.Describe())
	}
	t.Cleanup(func() {
		if rep, err := m.Sweep(nil); err != nil {
			t.Errorf("cleanup sweep: %v (%+v)", err, rep)
		}
		for _, c := range []string{"", "pids", "memory", "cpu", "freezer"} {
			d := filepath.Join("/sys/fs/cgroup", c, parent)
			// A killed process leaves its group when the kernel has finished its exit, which
			// may be just after the sweep returns: EBUSY is retried for a bounded time.
			err := unix.Rmdir(d)
			for deadline := time.Now().Add(5 * time.Second); errors.Is(err, unix.EBUSY) && time.Now().Before(deadline); err = unix.Rmdir(d) {
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
				t.Errorf("cleanup: rmdir %s: %v", d, err)
			}
		}
	})
	return m
}

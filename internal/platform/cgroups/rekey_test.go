package cgroups

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRekeyKeepsMembersAndLimits: the group takes the new name with its processes and
// limits; nothing answers to the old name; an existing target is refused.
func TestRekeyKeepsMembersAndLimits(t *testing.T) {
	m := testManager(t)
	want := Limits{Pids: 64, MemoryBytes: 64 << 20, CPUMillis: 1000}
	g, err := m.Create(KindVM, "member", want)
	if err != nil {
		t.Fatal(err)
	}
	cmd, release := startHeld(t, []string{"/bin/sh", "-c", "read x; sleep 300 & wait"})
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	release()
	waitMembers(t, g, 2)
	if _, err := m.Create(KindVM, "taken", Limits{Pids: 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Rekey(KindVM, "member", "taken"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("rekey onto an existing group: %v", err)
	}
	ng, err := m.Rekey(KindVM, "member", "claimer")
	if err != nil {
		t.Fatal(err)
	}
	if ng.Name() != "vm-claimer" || !ng.Contains(cmd.Process.Pid) {
		t.Fatalf("after rekey %s does not hold pid %d", ng.Path(), cmd.Process.Pid)
	}
	if pids, _ := ng.Pids(); len(pids) != 2 {
		t.Fatalf("after rekey the group holds %v, want the shell and its sleeper", pids)
	}
	if _, err := m.Load("vm-member"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old name still exists: %v", err)
	}
	if got := m.readLimits(ng); got != want {
		t.Fatalf("limits after rekey %+v, want %+v", got, want)
	}
	if rep, err := ng.Kill(); err != nil || !rep.Empty {
		t.Fatalf("kill: %+v %v", rep, err)
	}
	if err := ng.Delete(); err != nil {
		t.Fatal(err)
	}
}

// TestRekeyV2Migrates runs the v2 path (the unified hierarchy refuses renames): the
// members move to a new group with the same limits and the old group is removed.
func TestRekeyV2Migrates(t *testing.T) {
	root := unifiedRoot(t)
	parent := fmt.Sprintf("workbench-test-%d-v2rekey", os.Getpid())
	m := &Manager{mode: ModeV2, root: root, parent: parent, have: map[Controller]bool{Freezer: true}}
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		for _, c := range strings.Fields(string(b)) {
			m.have[Controller(c)] = true
		}
	}
	if miss := m.Missing(); len(miss) > 0 {
		t.Skipf("the cgroup2 mount at %s offers no %v controller (a hybrid layout): Create, and so the migration, needs them", root, miss)
	}
	old := &Group{m: m, name: "vm-member"}
	if err := os.MkdirAll(old.dir(""), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range []string{"vm-member", "vm-claimer"} {
			g := &Group{m: m, name: n}
			_, _ = g.Kill()
			_ = g.Delete()
		}
		_ = unix.Rmdir(filepath.Join(root, parent))
	})
	// The v2 hierarchy refuses to rename a group: the reason Rekey migrates there.
	if err := os.Rename(old.dir(""), filepath.Join(root, parent, "vm-renamed")); err == nil {
		t.Log("this kernel renamed a v2 group; Rekey migrates anyway")
		if err := os.Rename(filepath.Join(root, parent, "vm-renamed"), old.dir("")); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("/bin/sleep", "300")
	cmd.WaitDelay = 10 * time.Second
	if err := old.StartCmd(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ng, err := m.migrate(old, KindVM, "claimer")
	if err != nil {
		t.Fatal(err)
	}
	if !ng.Contains(cmd.Process.Pid) {
		t.Fatalf("pid %d not in %s after the migration", cmd.Process.Pid, ng.Path())
	}
	if _, err := os.Stat(old.dir("")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old group remains: %v", err)
	}
}

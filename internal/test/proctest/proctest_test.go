package proctest

import (
	"os/exec"
	"slices"
	"testing"
)

// TestFindsAProcessAndNotAfterItEnds: a real sleep is found by its exact argv, by an
// argument, by Pids and as live; once it is killed and reaped nothing matches it.
func TestFindsAProcessAndNotAfterItEnds(t *testing.T) {
	const arg = "4242.125"
	cmd := exec.Command("/bin/sleep", arg)
	if err := cmd.Start(); err != nil {
		t.Skipf("no /bin/sleep here: %v", err)
	}
	pid := cmd.Process.Pid
	all, err := Pids()
	if err != nil || !slices.Contains(all, pid) {
		t.Fatalf("Pids() = %d pids, %v: %d missing", len(all), err, pid)
	}
	if got := Exactly("/bin/sleep", arg); !slices.Equal(got, []int{pid}) {
		t.Fatalf("Exactly = %v, want [%d]", got, pid)
	}
	if got := Exactly("/bin/sleep"); slices.Contains(got, pid) {
		t.Fatalf("Exactly matched a prefix of the argv: %v", got)
	}
	if got := WithArg("\x00" + arg + "\x00"); !slices.Equal(got, []int{pid}) {
		t.Fatalf("WithArg = %v, want [%d]", got, pid)
	}
	if !Live(pid) {
		t.Fatalf("pid %d is running but not Live", pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if got := Exactly("/bin/sleep", arg); len(got) != 0 {
		t.Fatalf("Exactly after the kill = %v", got)
	}
	if Live(pid) {
		t.Fatalf("pid %d reaped but Live", pid)
	}
}

package agent

import (
	"os/exec"
	"syscall"
	"testing"

	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/procexec"
)

func startRecordedGroup(t *testing.T) (pgid int, start uint64) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 300 & sleep 300 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = procexec.SignalGroup(cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	st, err := procexec.ProcessStartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, st
}

// The sweep kills a recorded group whose leader is the recorded incarnation, and nothing of
// the group remains when it reports Terminated.
func TestKillRecordedTerminatesTheGroup(t *testing.T) {
	pgid, start := startRecordedGroup(t)
	outcome, msg := killRecorded(pgid, pgid, start)
	if outcome != store.OutcomeTerminated {
		t.Fatalf("killRecorded = %s %q, want %s", outcome, msg, store.OutcomeTerminated)
	}
	if members, err := procexec.GroupMembers(pgid); err != nil {
		t.Fatal(err)
	} else {
		for _, m := range members {
			if m.State != 'Z' {
				t.Fatalf("member %d of group %d still in state %c after %q", m.Pid, pgid, m.State, msg)
			}
		}
	}
}

// A group that no longer exists is reported expired, not signalled.
func TestKillRecordedExpiredGroup(t *testing.T) {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if outcome, msg := killRecorded(cmd.Process.Pid, cmd.Process.Pid, 1); outcome != store.OutcomeExpired {
		t.Fatalf("killRecorded = %s %q, want %s", outcome, msg, store.OutcomeExpired)
	}
}

// A leader whose start time differs from the record is another process: never signalled.
func TestKillRecordedQuarantinesARecycledPid(t *testing.T) {
	pgid, start := startRecordedGroup(t)
	outcome, msg := killRecorded(pgid, pgid, start+1)
	if outcome != store.OutcomeQuarantined {
		t.Fatalf("killRecorded = %s %q, want %s", outcome, msg, store.OutcomeQuarantined)
	}
	if alive, err := procexec.GroupExists(pgid); err != nil || !alive {
		t.Fatalf("group %d after a quarantine: exists=%v err=%v, want it untouched", pgid, alive, err)
	}
	if st, err := procexec.ReadStat(pgid); err != nil || st.State == 'Z' {
		t.Fatalf("leader %d after a quarantine: %+v %v, want it running", pgid, st, err)
	}
}

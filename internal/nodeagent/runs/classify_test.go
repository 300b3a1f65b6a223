package runs

import (
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// TestClassify holds the one classification of a finished process that the command and
// action-run rooms (host and guest) share: every end, its code, message and exit code.
func TestClassify(t *testing.T) {
	exit := func(c int32) *int32 { return &c }
	capErr := actuation.Refusef(actuation.CodeCommandCapReached, "cap")
	for _, tc := range []struct {
		name     string
		x        Exit
		end      End
		code     actuation.Code
		msg      string
		exitCode *int32
		origin   string
		cleanup  bool
	}{
		{"exit 0", Exit{SignalOrigin: procexec.OriginExit, CleanupComplete: true}, EndSucceeded, "", "exited 0", exit(0), "exit", false},
		{"exit 3", Exit{ExitCode: 3, SignalOrigin: procexec.OriginExit, CleanupComplete: true}, EndFailed, "", "exited 3 ", exit(3), "exit", false},
		{"self signal", Exit{ExitCode: -1, Signal: "SIGSEGV", SignalOrigin: procexec.OriginExit, CleanupComplete: true}, EndFailed, "", "exited -1 SIGSEGV", exit(-1), "exit", false},
		{"timeout", Exit{ExitCode: -1, Signal: "SIGKILL", SignalOrigin: procexec.OriginTimeout, CleanupComplete: true}, EndTimedOut, "", "timed out; the process group was terminated", nil, "timeout", false},
		{"drained", Exit{ExitCode: -1, Signal: "SIGKILL", SignalOrigin: procexec.OriginCancel, Drained: true, Stopping: true, NodeName: "n1", Noun: "command", CleanupComplete: true},
			EndInterrupted, actuation.CodeInterrupted, "interrupted: node n1 was drained (cordoned) while the command ran", nil, "", false},
		{"stopping", Exit{ExitCode: -1, Signal: "SIGKILL", SignalOrigin: procexec.OriginCancel, Stopping: true, Noun: "action", CleanupComplete: true},
			EndInterrupted, actuation.CodeInterrupted, "interrupted: the node agent stopped while the action ran", nil, "", false},
		{"drained only counts when cancelled", Exit{SignalOrigin: procexec.OriginExit, Drained: true, Stopping: true, CleanupComplete: true}, EndSucceeded, "", "exited 0", exit(0), "exit", false},
		{"cancel", Exit{ExitCode: -1, Signal: "SIGKILL", SignalOrigin: procexec.OriginCancel, CleanupComplete: true}, EndCancelled, "", "cancelled (cancel)", nil, "cancel", false},
		{"operator", Exit{ExitCode: -1, Signal: "SIGKILL", SignalOrigin: procexec.OriginOperator}, EndCancelled, "", "cancelled (operator)", nil, "operator", true},
		{"runner refusal", Exit{Err: capErr}, EndFailed, actuation.CodeCommandCapReached, capErr.Error(), exit(0), "", false},
		{"guest exit 0", Exit{SignalOrigin: procexec.OriginExit, Remote: true}, EndSucceeded, "", "exited 0 in the guest", exit(0), "exit", false},
		{"guest exit 2", Exit{ExitCode: 2, SignalOrigin: procexec.OriginExit, Remote: true}, EndFailed, "", "exited 2 in the guest", exit(2), "exit", false},
		{"guest signal", Exit{ExitCode: -1, Signal: "SIGTERM", Remote: true}, EndFailed, "", "killed by SIGTERM in the guest", nil, "", false},
		{"guest timeout", Exit{ExitCode: 124, SignalOrigin: procexec.OriginTimeout, Remote: true}, EndTimedOut, "", "timed out; the guest terminated the process group", exit(124), "timeout", false},
		{"guest error", Exit{Err: capErr, Remote: true}, EndFailed, actuation.CodeCommandCapReached, capErr.Error(), nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Classify(tc.x)
			if e.End != tc.end || e.Code != tc.code || e.Message != tc.msg || e.SignalOrigin != tc.origin {
				t.Fatalf("Classify = %+v, want end %s code %q message %q origin %q", e, tc.end, tc.code, tc.msg, tc.origin)
			}
			switch {
			case (e.ExitCode == nil) != (tc.exitCode == nil):
				t.Fatalf("exit code %v, want %v", e.ExitCode, tc.exitCode)
			case e.ExitCode != nil && *e.ExitCode != *tc.exitCode:
				t.Fatalf("exit code %d, want %d", *e.ExitCode, *tc.exitCode)
			}
			if (e.Cleanup != "") != tc.cleanup {
				t.Fatalf("cleanup note %q, want one: %v", e.Cleanup, tc.cleanup)
			}
		})
	}
}

package runs

import (
	"fmt"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// End is how a finished run ended, before its kind names it as a phase (a TerminalCommand's
// CommandPhase, an ActionRun's ActionRunPhase).
type End string

// Ends of a finished run.
const (
	EndSucceeded   End = "Succeeded"
	EndFailed      End = "Failed"
	EndTimedOut    End = "TimedOut"
	EndCancelled   End = "Cancelled"
	EndInterrupted End = "Interrupted" // a Failed run with the code interrupted
)

// Exit is what is known of a finished run's process: the runner's result (host sandbox)
// or a remote (guest) report translated into the same terms (Remote set).
type Exit struct {
	// Err is the runner's (or the executor's) error: the run failed with its code.
	Err          error
	ExitCode     int
	Signal       string
	SignalOrigin procexec.Origin
	// CleanupComplete: the process group is gone (a host run; a guest run's group is the
	// guest's: never noted).
	CleanupComplete bool
	// Drained: the node was drained (cordoned) while the run ran; Stopping: the agent is
	// stopping. Both only matter for a run ended by cancellation.
	Drained, Stopping bool
	// NodeName names the node in a drained run's message; Noun names the run in an
	// interrupted run's message ("command", "action").
	NodeName, Noun string
	// Remote: the process ran outside the host sandbox (a backends.RemoteCommand, in a VM
	// guest): its report, not a runner's result (no zero result on an error, no process
	// group of the node's to clean up); its messages say where it ran.
	Remote bool
}

// Ending is the one classification of a finished run (Classify).
type Ending struct {
	End  End
	Code actuation.Code // the refusal code (Failed with the runner's code, Interrupted)
	// Message says what ended the run.
	Message string
	// ExitCode is set when the program exited (not when a signal ended it, unless the
	// signal came from its own exit).
	ExitCode *int32
	// SignalOrigin is what ended the process ("" for an interrupted run).
	SignalOrigin string
	// Cleanup is the note a run whose process group may remain appends to its message
	// ("" when the group is gone); the caller appends it after its own details.
	Cleanup string
}

// Classify is the one classification of a finished process — runner error, timeout,
// cancellation (drained node, stopping agent, deleted object, operator), exit code,
// signal — into its end, refusal code, message and exit code. The command and the action
// run rooms both call it; each names the end with its own phase.
func Classify(x Exit) Ending {
	e := Ending{SignalOrigin: string(x.SignalOrigin)}
	where := ""
	if x.Remote {
		where = " in the guest"
	}
	switch {
	case x.Err != nil:
		e.End, e.Code, e.Message = EndFailed, actuation.CodeOf(x.Err), x.Err.Error()
	case x.SignalOrigin == procexec.OriginTimeout && x.Remote:
		e.End, e.Message = EndTimedOut, "timed out; the guest terminated the process group"
	case x.SignalOrigin == procexec.OriginTimeout:
		e.End, e.Message = EndTimedOut, "timed out; the process group was terminated"
	case x.SignalOrigin == procexec.OriginCancel && x.Drained:
		e.End, e.Code, e.SignalOrigin = EndInterrupted, actuation.CodeInterrupted, ""
		e.Message = "interrupted: node " + x.NodeName + " was drained (cordoned) while the " + x.Noun + " ran"
	case x.SignalOrigin == procexec.OriginCancel && x.Stopping:
		// Killed because the node agent is stopping (e.g. its pod was deleted): nobody
		// cancelled it, and it will not be re-run — the truthful outcome is interrupted.
		e.End, e.Code, e.SignalOrigin = EndInterrupted, actuation.CodeInterrupted, ""
		e.Message = "interrupted: the node agent stopped while the " + x.Noun + " ran"
	case x.SignalOrigin == procexec.OriginCancel || x.SignalOrigin == procexec.OriginOperator:
		e.End, e.Message = EndCancelled, "cancelled ("+string(x.SignalOrigin)+")"
	case x.Signal != "" && x.Remote:
		e.End, e.Message = EndFailed, "killed by "+x.Signal+where
	case x.ExitCode == 0 && x.Signal == "":
		e.End, e.Message = EndSucceeded, "exited 0"+where
	case x.Remote:
		e.End, e.Message = EndFailed, fmt.Sprintf("exited %d%s", x.ExitCode, where)
	default:
		e.End, e.Message = EndFailed, fmt.Sprintf("exited %d %s", x.ExitCode, x.Signal)
	}
	// A host runner's error leaves its zero result: exit code 0 is recorded with it (as
	// always); a guest's error carries no exit code.
	if (x.Err == nil || !x.Remote) && (x.Signal == "" || x.SignalOrigin == procexec.OriginExit) {
		code := int32(x.ExitCode)
		e.ExitCode = &code
	}
	if !x.CleanupComplete && !x.Remote && x.Err == nil {
		e.Cleanup = "; cleanup incomplete: processes of the group may remain"
	}
	return e
}

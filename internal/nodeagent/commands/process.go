package commands

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/runs"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/platform/spans"
)

// awaitCommand waits for the process, appends its output to the session's event ring,
// persists the outcome, and wakes the reconciler to write it.
func (r *Room) awaitCommand(cmd *wbv1.TerminalCommand, h *procexec.Handle, out *liveOutput, started time.Time) {
	res, err := h.Wait()
	o := &Outcome{Started: started, Completed: time.Now(), Bytes: res.OutputBytesSeen, Truncated: res.Truncated, SignalOrigin: string(res.SignalOrigin)}
	sum := sha256.Sum256(res.Output)
	o.OutputDigest = "sha256:" + hex.EncodeToString(sum[:])
	o.SeqFrom, o.SeqTo = out.bounds() // the output reached the ring while the command ran
	e := runs.Classify(runs.Exit{Err: err, ExitCode: res.ExitCode, Signal: res.Signal, SignalOrigin: res.SignalOrigin,
		CleanupComplete: res.CleanupComplete, NodeName: r.d.NodeName, Noun: "command",
		Drained:  res.SignalOrigin == procexec.OriginCancel && r.commandDrained(string(cmd.UID)),
		Stopping: res.SignalOrigin == procexec.OriginCancel && r.d.Stopping()})
	o.applyEnding(e)
	if s := res.Cgroup.Summary(); s != "" {
		o.Message += "; " + s // what the cgroup teardown found, limits that were hit
	}
	o.Message += e.Cleanup
	markCommand(cmd, "node-command-ended")
	r.d.RecordAfter(cmd, cmd.Labels[wbv1.EnvironmentLabel], o, res.Output) // seed 004
	r.recordOutcome(string(cmd.UID), o)
	markCommand(cmd, "node-outcome-stored")
	r.d.Finished()
	r.d.Wake(cmd)
}

// applyEnding names a finished command's classification (runs.Classify) with its phase.
func (o *Outcome) applyEnding(e runs.Ending) {
	o.Phase = map[runs.End]wbv1.CommandPhase{runs.EndSucceeded: wbv1.CommandSucceeded, runs.EndFailed: wbv1.CommandFailed,
		runs.EndTimedOut: wbv1.CommandTimedOut, runs.EndCancelled: wbv1.CommandCancelled, runs.EndInterrupted: wbv1.CommandFailed}[e.End]
	o.RefusalCode, o.Message, o.ExitCode, o.SignalOrigin = string(e.Code), e.Message, e.ExitCode, e.SignalOrigin
}

// recordOutcome persists a finished command's outcome and hands it to the reconciler. A
// store failure is logged and left for the reconciler's pass to retry (persisted unset).
func (r *Room) recordOutcome(uid string, o *Outcome) {
	err := r.d.Table.Record(uid, o, func(lc *Live, o *Outcome) {
		if lc.Stopping && !lc.Drained && o.Phase == wbv1.CommandFailed && o.ExitCode == nil {
			o.Phase, o.RefusalCode, o.Message = wbv1.CommandCancelled, "", "cancelled: the command was deleted or cancelled ("+o.Message+")"
		}
	})
	if err != nil && r.d.Ctx != nil {
		ctrl.LoggerFrom(r.d.Ctx).Error(err, "Storing a command outcome; the next pass retries", "command", uid)
	}
}

// wake re-queues obj. Senders are bounded (one goroutine per running command or session,
// markCommand marks a step of the command's create → outcome path for the benchmarks' span
// breakdown (internal/platform/spans); nothing happens unless a recorder is installed.
func markCommand(cmd *wbv1.TerminalCommand, step string) {
	if spans.Enabled() {
		spans.Mark(cmd.Namespace+"/"+cmd.Name, step)
	}
}

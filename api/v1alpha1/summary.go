package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
)

// Summary is what a reader (the CLI, the MCP server, a kstatus-style health check) shows of
// an object's lifecycle: its phase, whether it has its one outcome, and its health. It is
// derived from the object's conditions alone, with the same functions the writers use (the
// *PhaseFor functions above), never read from status.phase: a status.phase field is a
// convenience for `kubectl get` columns, written by its one writer, and may trail the
// condition that moved it by one write (a command the manager decided gets its phase from
// the manager after the node's Completed). A reader that waited for an outcome condition and
// then read status.phase could show an outcome that was not the recorded one — the
// `kubectl workbench action run` "run ended Pending" bug. Read this instead.
//
// +kubebuilder:object:generate=false
type Summary struct {
	// Phase is the kind's phase (CommandPhase, ActionRunPhase, FilePatchPhase,
	// WaitConditionStatus, ProbeResult, EnvironmentPhase) as a string.
	Phase string
	// Final says the object has its one recorded outcome.
	Final bool
	// Health is the kstatus summary of Phase.
	Health Health
}

// SummaryOf derives the Summary of obj; ok is false for a kind without a lifecycle derived
// from its conditions.
func SummaryOf(obj runtime.Object) (s Summary, ok bool) {
	switch o := obj.(type) {
	case *TerminalCommand:
		p := CommandPhaseFor(o.Status.Conditions)
		return Summary{Phase: string(p), Final: CommandIsFinal(o.Status.Conditions), Health: CommandHealth(p)}, true
	case *ActionRun:
		p := ActionRunPhaseFor(o.Status.Conditions)
		return Summary{Phase: string(p), Final: ActionRunIsFinal(o.Status.Conditions), Health: ActionRunHealth(p)}, true
	case *FilePatch:
		p := FilePatchPhaseFor(o.Status.Conditions)
		return Summary{Phase: string(p), Final: FilePatchIsFinal(p), Health: FilePatchHealth(p)}, true
	case *Wait:
		p := WaitStatusFor(o.Status.Conditions)
		return Summary{Phase: string(p), Final: WaitIsFinal(p), Health: WaitHealth(p)}, true
	case *Probe:
		p := ProbeResultFor(o.Status.Conditions)
		return Summary{Phase: string(p), Final: ProbeIsFinal(p), Health: ProbeHealth(p)}, true
	case *Environment:
		p := EnvironmentPhaseFor(o.Status.Conditions, o.DeletionTimestamp != nil)
		return Summary{Phase: string(p), Final: p == EnvironmentFailed || p == EnvironmentExpired || p == EnvironmentClosed, Health: EnvironmentHealth(p)}, true
	}
	return Summary{}, false
}

// ActionRunSummary is SummaryOf for an ActionRun (no ok to check).
func ActionRunSummary(r *ActionRun) Summary { s, _ := SummaryOf(r); return s }

// CommandSummary is SummaryOf for a TerminalCommand.
func CommandSummary(c *TerminalCommand) Summary { s, _ := SummaryOf(c); return s }

// WaitSummary is SummaryOf for a Wait (Phase is its conditionStatus).
func WaitSummary(w *Wait) Summary { s, _ := SummaryOf(w); return s }

// ProbeSummary is SummaryOf for a Probe (Phase is its result).
func ProbeSummary(p *Probe) Summary { s, _ := SummaryOf(p); return s }

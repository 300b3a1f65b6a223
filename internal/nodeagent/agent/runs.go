package agent

import "sensorium.dev/workbench/internal/nodeagent/runs"

// The node's runs (internal/nodeagent/runs: the command path's one start → record →
// outcome sequence): a TerminalCommand this process started is a liveCommand, an ActionRun
// a liveAction.
type (
	liveCommand = runs.Run[commandOutcome]
	liveAction  = runs.Run[actionOutcome]
)

// RecordedPhase is the phase a command's start record carries with its outcome.
func (o commandOutcome) RecordedPhase() string { return string(o.Phase) }

// RecordedPhase is the phase an action run's start record carries with its outcome.
func (o actionOutcome) RecordedPhase() string { return string(o.Phase) }

package agent

import "sensorium.dev/workbench/internal/nodeagent/runs"

// liveCommand is a TerminalCommand this process started (internal/nodeagent/runs: the
// command path's one start → record → outcome sequence, shared with the ActionRun room).
type liveCommand = runs.Run[commandOutcome]

// RecordedPhase is the phase a command's start record carries with its outcome.
func (o commandOutcome) RecordedPhase() string { return string(o.Phase) }

package agent

import "sensorium.dev/workbench/internal/nodeagent/commands"

// liveCommand is a TerminalCommand this process started and commandOutcome its one
// recorded outcome (the TerminalCommand room, internal/nodeagent/commands, owns both).
type (
	liveCommand    = commands.Live
	commandOutcome = commands.Outcome
)

package actuation

// Node ceilings: the one source of the limits a node enforces. The admission webhooks
// refuse above them with the code named here, the node's runtimes (procexec for commands,
// the session manager for sessions) refuse above them with the same code, and the node
// agent advertises them in its WorkbenchNode status. What admission accepts, the node
// runs; what the node would refuse, admission refuses first.
const (
	// MaxCommandTimeoutSeconds caps a structured command's timeout and a profile's
	// maxTimeoutSeconds (timeout-above-max).
	MaxCommandTimeoutSeconds = 3600
	// MaxCommandOutputBytes caps a command's shared stdout+stderr budget and a profile's
	// maxOutputBytes (output-cap-above-max).
	MaxCommandOutputBytes = 16 << 20
	// MaxSessionDurationSeconds caps a session's maxDurationSeconds and
	// idleTimeoutSeconds (timeout-above-max).
	MaxSessionDurationSeconds = 12 * 3600
)

// Limit is one node ceiling and where it applies: a Bound (Field is the API field it
// bounds, kind.path).
type Limit = Bound

// Limits lists every node ceiling, for table tests and docs.
func Limits() []Limit {
	return []Limit{
		{"command-timeout", "TerminalCommand.spec.timeoutSeconds", MaxCommandTimeoutSeconds, CodeTimeoutAboveMax},
		{"command-output", "TerminalCommand.spec.outputBytes", MaxCommandOutputBytes, CodeOutputCapAboveMax},
		{"profile-timeout", "CommandProfile.spec.maxTimeoutSeconds", MaxCommandTimeoutSeconds, CodeTimeoutAboveMax},
		{"profile-output", "CommandProfile.spec.maxOutputBytes", MaxCommandOutputBytes, CodeOutputCapAboveMax},
		{"session-duration", "TerminalSession.spec.maxDurationSeconds", MaxSessionDurationSeconds, CodeTimeoutAboveMax},
		{"session-idle", "TerminalSession.spec.idleTimeoutSeconds", MaxSessionDurationSeconds, CodeTimeoutAboveMax},
	}
}

// ValidateCommandCeilings refuses a command's timeout or output cap above the node
// ceilings, whatever its profile says.
func ValidateCommandCeilings(timeoutSeconds, outputBytes int64) []*Refusal {
	var out []*Refusal
	if timeoutSeconds > MaxCommandTimeoutSeconds {
		out = append(out, Refuse(CodeTimeoutAboveMax, "spec.timeoutSeconds", "must not exceed the node ceiling %d (got %d)", MaxCommandTimeoutSeconds, timeoutSeconds))
	}
	if outputBytes > MaxCommandOutputBytes {
		out = append(out, Refuse(CodeOutputCapAboveMax, "spec.outputBytes", "must not exceed the node ceiling %d (got %d)", MaxCommandOutputBytes, outputBytes))
	}
	return out
}

// ValidateSessionCeilings refuses a session's durations above the node ceiling.
func ValidateSessionCeilings(maxDurationSeconds, idleTimeoutSeconds int64) []*Refusal {
	var out []*Refusal
	if maxDurationSeconds > MaxSessionDurationSeconds {
		out = append(out, Refuse(CodeTimeoutAboveMax, "spec.maxDurationSeconds", "must not exceed the node ceiling %d (got %d)", MaxSessionDurationSeconds, maxDurationSeconds))
	}
	if idleTimeoutSeconds > MaxSessionDurationSeconds {
		out = append(out, Refuse(CodeTimeoutAboveMax, "spec.idleTimeoutSeconds", "must not exceed the node ceiling %d (got %d)", MaxSessionDurationSeconds, idleTimeoutSeconds))
	}
	return out
}

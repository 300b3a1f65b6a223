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
	out := aboveCeiling(nil, CodeTimeoutAboveMax, "spec.timeoutSeconds", MaxCommandTimeoutSeconds, timeoutSeconds)
	return aboveCeiling(out, CodeOutputCapAboveMax, "spec.outputBytes", MaxCommandOutputBytes, outputBytes)
}

// ValidateSessionCeilings refuses a session's durations above the node ceiling.
func ValidateSessionCeilings(maxDurationSeconds, idleTimeoutSeconds int64) []*Refusal {
	out := aboveCeiling(nil, CodeTimeoutAboveMax, "spec.maxDurationSeconds", MaxSessionDurationSeconds, maxDurationSeconds)
	return aboveCeiling(out, CodeTimeoutAboveMax, "spec.idleTimeoutSeconds", MaxSessionDurationSeconds, idleTimeoutSeconds)
}

// aboveCeiling appends to out the refusal (code, at field) of a value got above the node
// ceiling limit; out is returned as it is when got is within it.
func aboveCeiling(out []*Refusal, code Code, field string, limit, got int64) []*Refusal {
	if got > limit {
		out = append(out, Refuse(code, field, "must not exceed the node ceiling %d (got %d)", limit, got))
	}
	return out
}

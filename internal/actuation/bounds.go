package actuation

// Size bounds of what a command carries: the one table. The CRD markers of
// TerminalCommand.spec (config/crd/bases, checked by TestBoundsTableMatchesEveryLayer), the
// admission checks here (ValidateArgvShape, ValidateEnvVar, ValidateCommandCeilings), the
// node's process runner (internal/platform/procexec: MaxArgs, MaxArgBytes, MaxEnvVars,
// MaxEnvBytes, MaxOutputBytes) and the guest protocol (guest/protocol/v1: MaxArgs, MaxEnv)
// all take their numbers from these constants; the test fails when one of them drifts.
// What admission accepts fits every layer below it.
const (
	// MaxProcessEnvVars bounds the environment a sandboxed process receives: the profile's
	// defaults and the admitted overrides (MaxEnvDefaults + MaxEnvOverrides) plus what the
	// node adds (TMPDIR, pinned git variables), with room to spare.
	MaxProcessEnvVars = 256
	// MaxProcessEnvBytes bounds that environment's total size ("KEY=VALUE\x00" each).
	MaxProcessEnvBytes = 64 << 10
	// MaxArgvWireBytes is the argv's size as a runner counts it (each atom with its NUL
	// terminator): MaxArgvTotalBytes of atoms plus one byte per atom.
	MaxArgvWireBytes = MaxArgvTotalBytes + MaxArgv
)

// Bound is one size bound and the code it is refused with.
type Bound struct {
	Name  string // stable name, used in tests and docs
	Field string // what it bounds
	Max   int64
	Code  Code
}

// Bounds lists the size bounds of a command, for the drift test and docs.
func Bounds() []Bound {
	return []Bound{
		{"argv-atoms", "TerminalCommand.spec.argv (items)", MaxArgv, CodeArgvInvalid},
		{"argv-atom-bytes", "TerminalCommand.spec.argv[*] (bytes)", MaxArgBytes, CodeArgvInvalid},
		{"argv-total-bytes", "TerminalCommand.spec.argv (bytes, all atoms)", MaxArgvTotalBytes, CodeArgvInvalid},
		{"env-overrides", "TerminalCommand.spec.env (items)", MaxEnvOverrides, CodeEnvOverrideNotAllowed},
		{"env-key-bytes", "TerminalCommand.spec.env[*].name (bytes)", MaxEnvKeyBytes, CodeEnvKeyInvalid},
		{"env-value-bytes", "TerminalCommand.spec.env[*].value (bytes)", MaxEnvValueBytes, CodeEnvValueInvalid},
		{"process-env-vars", "the sandboxed process's environment (entries)", MaxProcessEnvVars, CodeEnvOverrideNotAllowed},
		{"process-env-bytes", "the sandboxed process's environment (bytes)", MaxProcessEnvBytes, CodeEnvValueInvalid},
		{"output-bytes", "TerminalCommand.spec.outputBytes", MaxCommandOutputBytes, CodeOutputCapAboveMax},
		{"timeout-seconds", "TerminalCommand.spec.timeoutSeconds", MaxCommandTimeoutSeconds, CodeTimeoutAboveMax},
	}
}

// OrDefault is the rule of every configurable cap: a value that is not positive (zero:
// unset; negative: meaningless) asks for the default def.
func OrDefault[T ~int | ~int32 | ~int64](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

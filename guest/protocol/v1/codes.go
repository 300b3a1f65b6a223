package protocol

import (
	"errors"
	"fmt"
)

// Outcome of one operation.
type Outcome string

// The closed set of outcomes.
const (
	// OutcomeSucceeded: the effect happened (or the observation was made) as requested.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeRefused: nothing was done; Code says why.
	OutcomeRefused Outcome = "refused"
	// OutcomeUnknown: an admitted effect ran but its outcome cannot be proved (e.g. a
	// rename happened but the directory sync failed). Never used for a refusal.
	OutcomeUnknown Outcome = "unknown"
)

// Valid reports whether o is one of the closed set.
func (o Outcome) Valid() bool {
	return o == OutcomeSucceeded || o == OutcomeRefused || o == OutcomeUnknown
}

// Stable refusal codes. Frame-level codes close the connection (sent in an error frame);
// operation-level codes are carried by a refused result and the connection stays usable.
const (
	// Frame level.
	CodeBadMagic           = "bad-magic"
	CodeUnsupportedVersion = "unsupported-version"
	CodeUnknownFrameType   = "unknown-frame-type"
	CodeReservedFlags      = "reserved-flags"
	CodeFrameTooLarge      = "frame-too-large"
	CodeTooManyChunks      = "too-many-chunks"
	CodeTransferTooLarge   = "transfer-too-large"
	CodeDigestMismatch     = "digest-mismatch"
	CodeTruncatedFrame     = "truncated-frame"
	CodeUnexpectedFrame    = "unexpected-frame"
	CodeBadHeader          = "bad-header"
	CodeSequenceReplayed   = "sequence-replayed"
	CodeDeadlineMissing    = "deadline-missing"
	CodeDeadlineTooLong    = "deadline-too-long"
	CodeDeadlineExceeded   = "deadline-exceeded"
	CodeMalformedPayload   = "malformed-payload"
	CodeUnknownOperation   = "unknown-operation"
	CodeHandshakeRequired  = "handshake-required"
	CodeChannelMismatch    = "channel-mismatch"
	CodeTransferIncomplete = "transfer-incomplete"
	CodeTransferMismatch   = "transfer-mismatch"
	CodeConnectionCap      = "connection-cap-reached"

	// Handshake.
	CodeProtocolMismatch    = "protocol-version-mismatch"
	CodeEnvironmentMismatch = "environment-mismatch"
	CodeGenerationMismatch  = "generation-mismatch"
	CodePlanDigestMismatch  = "plan-digest-mismatch"
	CodeImageDigestMismatch = "image-digest-mismatch"
	CodeNonceMismatch       = "nonce-mismatch"
	CodeCIDMismatch         = "cid-mismatch"
	CodeBindingUnavailable  = "binding-unavailable"
	CodeBindingInvalid      = "binding-invalid"

	// Operation level.
	CodeInvalidSpec          = "invalid-spec"
	CodeInvalidPath          = "invalid-path"
	CodePathEscapesRoot      = "path-escapes-root"
	CodeNotFound             = "not-found"
	CodeNotDirectory         = "not-a-directory"
	CodeNotRegularFile       = "not-a-regular-file"
	CodeTooLarge             = "too-large"
	CodeStageCapReached      = "stage-cap-reached"
	CodeStageUnknown         = "stage-unknown"
	CodeStageInFlight        = "stage-in-flight"
	CodeBaseMismatch         = "base-mismatch"
	CodeSessionUnknown       = "session-unknown"
	CodeSessionExists        = "session-exists"
	CodeSessionCapReached    = "session-cap-reached"
	CodeProcessCapReached    = "process-cap-reached"
	CodeSessionNotRunning    = "session-not-running"
	CodeQuiesced             = "quiesced"
	CodeTimeoutAboveDeadline = "timeout-above-deadline"
	CodeOutputCapAboveMax    = "output-cap-above-max"
	CodeExecFailed           = "exec-failed"
	CodeIOError              = "io-error"
	CodeShuttingDown         = "shutting-down"
)

// Refusal is a refusal with a stable code. Protocol functions return it (possibly wrapped)
// for every violation they detect.
type Refusal struct {
	Code    string
	Message string
}

// Refusef builds a refusal.
func Refusef(code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (r *Refusal) Error() string {
	if r.Message == "" {
		return "refused: " + r.Code
	}
	return "refused: " + r.Code + ": " + r.Message
}

// Is makes errors.Is(err, &Refusal{Code: c}) match any refusal with code c.
func (r *Refusal) Is(target error) bool {
	t, ok := target.(*Refusal)
	return ok && t.Code == r.Code
}

// CodeOf returns the refusal code in err's chain, or "".
func CodeOf(err error) string {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

package protocol

import (
	"errors"
	"fmt"

	"sensorium.dev/workbench/internal/actuation"
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

// Stable refusal codes, all from the host's one closed vocabulary
// (internal/actuation/codes.go). Lexical path refusals carry the vocabulary's path
// codes (CheckPath applies actuation.ValidateRelativePath, the host's own rule);
// CodePathEscapesRoot is a path that resolves outside the root (openat2
// RESOLVE_BENEATH), reported as symlink-escape. Frame-level codes close the connection (sent in an error frame);
// operation-level codes are carried by a refused result and the connection stays usable.
const (
	// Frame level.
	CodeBadMagic           = string(actuation.CodeBadMagic)
	CodeUnsupportedVersion = string(actuation.CodeUnsupportedVersion)
	CodeUnknownFrameType   = string(actuation.CodeUnknownFrameType)
	CodeReservedFlags      = string(actuation.CodeReservedFlags)
	CodeFrameTooLarge      = string(actuation.CodeFrameTooLarge)
	CodeTooManyChunks      = string(actuation.CodeTooManyChunks)
	CodeTransferTooLarge   = string(actuation.CodeTransferTooLarge)
	CodeDigestMismatch     = string(actuation.CodeDigestMismatch)
	CodeTruncatedFrame     = string(actuation.CodeTruncatedFrame)
	CodeUnexpectedFrame    = string(actuation.CodeUnexpectedFrame)
	CodeBadHeader          = string(actuation.CodeBadHeader)
	CodeSequenceReplayed   = string(actuation.CodeSequenceReplayed)
	CodeDeadlineMissing    = string(actuation.CodeDeadlineMissing)
	CodeDeadlineTooLong    = string(actuation.CodeDeadlineTooLong)
	CodeDeadlineExceeded   = string(actuation.CodeDeadlineExceeded)
	CodeMalformedPayload   = string(actuation.CodeMalformedPayload)
	CodeUnknownOperation   = string(actuation.CodeUnknownOperation)
	CodeHandshakeRequired  = string(actuation.CodeHandshakeRequired)
	CodeChannelMismatch    = string(actuation.CodeChannelMismatch)
	CodeTransferIncomplete = string(actuation.CodeTransferIncomplete)
	CodeTransferMismatch   = string(actuation.CodeTransferMismatch)
	CodeConnectionCap      = string(actuation.CodeConnectionCap)
	CodeAnswerOverBound    = string(actuation.CodeAnswerOverBound) // the host refuses a guest answer beyond its request's bounds

	// Handshake.
	CodeProtocolMismatch    = string(actuation.CodeProtocolMismatch)
	CodeEnvironmentMismatch = string(actuation.CodeEnvironmentMismatch)
	CodeGenerationMismatch  = string(actuation.CodeGenerationMismatch)
	CodePlanDigestMismatch  = string(actuation.CodePlanDigestMismatch)
	CodeImageDigestMismatch = string(actuation.CodeImageDigestMismatch)
	CodeNonceMismatch       = string(actuation.CodeNonceMismatch)
	CodeCIDMismatch         = string(actuation.CodeCIDMismatch)
	CodeBindingUnavailable  = string(actuation.CodeBindingUnavailable)
	CodeBindingInvalid      = string(actuation.CodeBindingInvalid)

	// Operation level.
	CodeInvalidSpec          = string(actuation.CodeInvalidSpec)
	CodePathEscapesRoot      = string(actuation.CodeSymlinkEscape)
	CodeNotFound             = string(actuation.CodeNotFound)
	CodeNotDirectory         = string(actuation.CodeNotDirectory)
	CodeNotRegularFile       = string(actuation.CodeNotRegularFile)
	CodeTooLarge             = string(actuation.CodeTooLarge)
	CodeStageCapReached      = string(actuation.CodeStageCapReached)
	CodeStageUnknown         = string(actuation.CodeStageUnknown)
	CodeStageInFlight        = string(actuation.CodeStageInFlight)
	CodeBaseMismatch         = string(actuation.CodeBaseMismatch)
	CodeSessionUnknown       = string(actuation.CodeSessionUnknown)
	CodeSessionExists        = string(actuation.CodeSessionExists)
	CodeSessionCapReached    = string(actuation.CodeSessionCapReached)
	CodeProcessCapReached    = string(actuation.CodeProcessCapReached)
	CodeSessionNotRunning    = string(actuation.CodeSessionNotRunning)
	CodeQuiesced             = string(actuation.CodeQuiesced)
	CodeTimeoutAboveDeadline = string(actuation.CodeTimeoutAboveDeadline)
	CodeOutputCapAboveMax    = string(actuation.CodeOutputCapAboveMax)
	CodeExecFailed           = string(actuation.CodeExecFailed)
	CodeIOError              = string(actuation.CodeIOError)
	CodeShuttingDown         = string(actuation.CodeShuttingDown)
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

// IsPathCode reports whether code is one of the lexical path refusals of
// actuation.ValidateRelativePath (path-empty, path-absolute, path-traversal,
// path-invalid-component, path-invalid-character, path-too-long).
func IsPathCode(code string) bool {
	switch actuation.Code(code) {
	case actuation.CodePathEmpty, actuation.CodePathAbsolute, actuation.CodePathTraversal,
		actuation.CodePathInvalidComponent, actuation.CodePathInvalidCharacter, actuation.CodePathTooLong:
		return true
	}
	return false
}

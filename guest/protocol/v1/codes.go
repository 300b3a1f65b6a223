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

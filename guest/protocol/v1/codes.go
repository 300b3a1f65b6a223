package protocol

import "sensorium.dev/workbench/internal/actuation"

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

// IsPathCode reports whether code is one of the lexical path refusals of
// actuation.ValidateRelativePath (path-empty, path-absolute, path-traversal,
// path-invalid-component, path-invalid-character, path-too-long).
func IsPathCode(code actuation.Code) bool {
	switch code {
	case actuation.CodePathEmpty, actuation.CodePathAbsolute, actuation.CodePathTraversal,
		actuation.CodePathInvalidComponent, actuation.CodePathInvalidCharacter, actuation.CodePathTooLong:
		return true
	}
	return false
}

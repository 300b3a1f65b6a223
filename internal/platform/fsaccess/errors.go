// Package fsaccess gives the node agent bounded, kernel-enforced access beneath
// one admitted directory (a Root). Every path is checked lexically first and then
// resolved by openat2(2) with RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS relative to a
// directory fd opened once, so `..`, absolute symlinks and symlinks that leave the
// root are refused by the kernel, not by string comparison. There is no fallback:
// on a kernel without openat2 every operation refuses with CodeOpenat2Unavailable.
//
// The package has no Kubernetes imports; it is pure mechanics.
package fsaccess

import (
	"errors"
	"fmt"

	"sensorium.dev/workbench/internal/actuation"
)

// Refusal codes. Path codes mirror internal/actuation's closed vocabulary so the
// lead can put actuation.ValidateRelativePath in front without re-mapping.
const (
	CodePathEmpty            = string(actuation.CodePathEmpty)
	CodePathAbsolute         = string(actuation.CodePathAbsolute)
	CodePathTraversal        = string(actuation.CodePathTraversal)
	CodePathInvalidComponent = string(actuation.CodePathInvalidComponent)
	CodePathInvalidCharacter = string(actuation.CodePathInvalidCharacter)
	CodePathTooLong          = string(actuation.CodePathTooLong)
	CodeSymlinkEscape        = string(actuation.CodeSymlinkEscape)
	CodeDigestMismatch       = string(actuation.CodeDigestMismatch)

	// Codes introduced by this package (not yet in actuation's vocabulary).
	CodeOpenat2Unavailable = string(actuation.CodeOpenat2Unavailable) // kernel lacks openat2: fail closed
	CodePathNotFound       = string(actuation.CodePathNotFound)       // wraps ENOENT, errors.Is(err, fs.ErrNotExist) holds
	CodeNotRegularFile     = string(actuation.CodeNotRegularFile)     // read/write of a dir, fifo, device, socket
	CodeNotDirectory       = string(actuation.CodeNotDirectory)       // a directory was required
	CodeReadCapAboveMax    = string(actuation.CodeReadCapAboveMax)    // Read maxBytes above MaxReadBytesHard
	CodeTooManyEntries     = string(actuation.CodeTooManyEntries)     // RemoveAll above MaxRemoveEntries
	CodeDigestInvalid      = string(actuation.CodeDigestInvalid)      // not "sha256:<64 lowercase hex>"
	CodeFileTooLarge       = string(actuation.CodeFileTooLarge)       // ReadFile above the caller's cap
)

// Error is a refusal (or a classified failure) with a stable Code that tests,
// status fields and dashboards branch on. Err, when set, is the underlying cause
// and is reachable through errors.Is / errors.As.
type Error struct {
	Code    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Code + ": " + e.Message + ": " + e.Err.Error()
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds a refusal with a formatted message (used by sibling packages).
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap builds a refusal that keeps cause reachable via errors.Is/As.
func Wrap(code string, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: cause}
}

// CodeOf returns the Code of the first *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Package refusal defines the explicit refusal error shared by the node agent's
// process runtime packages (ring, session, procexec).
//
// A refusal is not a failure of the runtime: it is the runtime declining a
// request because a declared cap, policy or safety property would otherwise be
// violated ("overload refuses; it never queues without bound"). Callers map the
// The codes are those of internal/actuation's closed vocabulary, named here for the
// runtime packages.
package refusal

import (
	"errors"
	"fmt"

	"sensorium.dev/workbench/internal/actuation"
)

// Refusal codes used by the node agent runtime. Each cap that can refuse
// documents which of these it returns.
const (
	// SessionCapReached: node-wide or per-environment PTY session cap reached.
	SessionCapReached = string(actuation.CodeSessionCapReached)
	// ReaderCapReached: no reader-task permit is available (PTY output pumps
	// and long-poll event waiters share the permit pool).
	ReaderCapReached = string(actuation.CodeReaderCapReached)
	// QueueFull: a bounded input queue cannot accept another item.
	QueueFull = string(actuation.CodeQueueFull)
	// EventBufferFull: an event buffer cannot accept the request (an event
	// larger than the whole buffer, or a requested depth above the node cap).
	EventBufferFull = string(actuation.CodeEventBufferFull)
	// TimeoutAboveMax: a requested duration (timeout, grace, max duration,
	// idle window) exceeds the node's ceiling.
	TimeoutAboveMax = string(actuation.CodeTimeoutAboveMax)
	// EgressForbidden: network isolation could not be established (or a
	// network mode other than "none" was requested); the runtime fails closed
	// and never falls back to host networking.
	EgressForbidden = string(actuation.CodeEgressForbidden)
	// Interrupted: the operation was interrupted (context cancelled, runtime
	// shutting down) before it could be admitted.
	Interrupted = string(actuation.CodeInterrupted)
	// LandlockUnavailable: filesystem write confinement was required but the
	// kernel's Landlock support is missing or too old; fail closed.
	LandlockUnavailable = string(actuation.CodeLandlockUnavailable)
	// UserNamespaceUnavailable: the sandbox's user, PID, mount, cgroup or
	// network namespaces could not be created; fail closed.
	UserNamespaceUnavailable = string(actuation.CodeUserNamespaceUnavailable)
	// IdmapUnavailable: the roots could not be attached through idmapped
	// mounts (kernel or filesystem support missing); fail closed.
	IdmapUnavailable = string(actuation.CodeIdmapUnavailable)
	// SeccompUnavailable: the seccomp filter could not be built or installed;
	// fail closed.
	SeccompUnavailable = string(actuation.CodeSeccompUnavailable)
	// OutputCapAboveMax: a requested output byte cap exceeds the node ceiling.
	OutputCapAboveMax = string(actuation.CodeOutputCapAboveMax)
	// InputTooLarge: a single input write exceeds the per-write byte cap.
	InputTooLarge = string(actuation.CodeInputTooLarge)
	// CommandCapReached: the concurrent structured-command cap is reached.
	CommandCapReached = string(actuation.CodeCommandCapReached)
	// InvalidSpec: the request is malformed (relative executable, NUL bytes,
	// too many arguments, unknown signal, out-of-range size, ...).
	InvalidSpec = string(actuation.CodeInvalidSpec)
	// SessionExists: a session with the same ID is already registered.
	SessionExists = string(actuation.CodeSessionExists)
	// SessionNotRunning: the session is not in a phase that accepts the
	// request (input, resize, signal after close).
	SessionNotRunning = string(actuation.CodeSessionNotRunning)
	// SandboxSetupFailed: the sandbox helper could not establish isolation
	// (loopback, no_new_privs, ...) and refused to run the program.
	SandboxSetupFailed = string(actuation.CodeSandboxSetupFailed)
	// CleanupIncomplete: termination was requested but the runtime could not
	// (yet) confirm that no process of the group remains.
	CleanupIncomplete = string(actuation.CodeCleanupIncomplete)
	// CgroupUnavailable: a required cgroup controller is missing (or the group could
	// not be created); the runtime fails closed and runs nothing unconfined.
	CgroupUnavailable = string(actuation.CodeCgroupUnavailable)
)

// Error is an explicit refusal with a stable machine-readable Code and a
// human-readable Message.
type Error struct {
	Code    string
	Message string
}

// New builds a refusal with a formatted message.
func New(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error implements error.
func (e *Error) Error() string {
	if e.Message == "" {
		return "refused: " + e.Code
	}
	return "refused: " + e.Code + ": " + e.Message
}

// Is makes errors.Is(err, &Error{Code: c}) match any refusal with code c.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// CodeOf returns the refusal code carried by err (anywhere in its chain), or
// "" when err is not a refusal.
func CodeOf(err error) string {
	var r *Error
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

// Is reports whether err carries a refusal with the given code.
func Is(err error, code string) bool { return CodeOf(err) == code }

// Package refusal defines the explicit refusal error shared by the node agent's
// process runtime packages (ring, session, procexec).
//
// A refusal is not a failure of the runtime: it is the runtime declining a
// request because a declared cap, policy or safety property would otherwise be
// violated ("overload refuses; it never queues without bound"). Callers map the
// Code onto the actuation vocabulary; the codes used here match the strings of
// internal/actuation without importing it.
package refusal

import (
	"errors"
	"fmt"
)

// Refusal codes used by the node agent runtime. Each cap that can refuse
// documents which of these it returns.
const (
	// SessionCapReached: node-wide or per-environment PTY session cap reached.
	SessionCapReached = "session-cap-reached"
	// ReaderCapReached: no reader-task permit is available (PTY output pumps
	// and long-poll event waiters share the permit pool).
	ReaderCapReached = "reader-cap-reached"
	// QueueFull: a bounded input queue cannot accept another item.
	QueueFull = "queue-full"
	// EventBufferFull: an event buffer cannot accept the request (an event
	// larger than the whole buffer, or a requested depth above the node cap).
	EventBufferFull = "event-buffer-full"
	// TimeoutAboveMax: a requested duration (timeout, grace, max duration,
	// idle window) exceeds the node's ceiling.
	TimeoutAboveMax = "timeout-above-max"
	// EgressForbidden: network isolation could not be established (or a
	// network mode other than "none" was requested); the runtime fails closed
	// and never falls back to host networking.
	EgressForbidden = "egress-forbidden"
	// Interrupted: the operation was interrupted (context cancelled, runtime
	// shutting down) before it could be admitted.
	Interrupted = "interrupted"
	// LandlockUnavailable: filesystem write confinement was required but the
	// kernel's Landlock support is missing or too old; fail closed.
	LandlockUnavailable = "landlock-unavailable"
	// OutputCapAboveMax: a requested output byte cap exceeds the node ceiling.
	OutputCapAboveMax = "output-cap-above-max"
	// InputTooLarge: a single input write exceeds the per-write byte cap.
	InputTooLarge = "input-too-large"
	// CommandCapReached: the concurrent structured-command cap is reached.
	CommandCapReached = "command-cap-reached"
	// InvalidSpec: the request is malformed (relative executable, NUL bytes,
	// too many arguments, unknown signal, out-of-range size, ...).
	InvalidSpec = "invalid-spec"
	// SessionExists: a session with the same ID is already registered.
	SessionExists = "session-exists"
	// SessionNotRunning: the session is not in a phase that accepts the
	// request (input, resize, signal after close).
	SessionNotRunning = "session-not-running"
	// SandboxSetupFailed: the sandbox helper could not establish isolation
	// (loopback, no_new_privs, ...) and refused to run the program.
	SandboxSetupFailed = "sandbox-setup-failed"
	// CleanupIncomplete: termination was requested but the runtime could not
	// (yet) confirm that no process of the group remains.
	CleanupIncomplete = "cleanup-incomplete"
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

package dataplane

import (
	"context"
	"errors"
	"syscall"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// ErrNotFound is returned (wrapped) by a Resolver for an unknown session,
// environment or root; the data plane answers 404 not-found.
var ErrNotFound = errors.New("not found")

// SessionInfo carries the parts of the TerminalSession object the data plane
// needs besides the live session.
type SessionInfo struct {
	// RawInput is the session's spec.rawInput; input is accepted only when it
	// is OperatorOnly (and SubjectAccessReview allows terminalsessions/input).
	RawInput wbv1.RawInput
}

// Resolver maps URL coordinates to the node's live objects. It is implemented
// by the node agent, which checks that the object is bound to this node.
// Errors wrapping ErrNotFound become 404; refusal and fsaccess codes pass
// through; anything else is a 500.
type Resolver interface {
	// Session returns the live terminal of TerminalSession ns/name.
	Session(ns, name string) (Terminal, SessionInfo, error)
	// Root returns the file access of the named root of Environment ns/env: a
	// host directory (HostFiles) or a root inside a VM guest. It stays owned by
	// the Resolver: the data plane never closes it.
	Root(ns, env, root string) (Files, error)
}

// Files is bounded read access beneath one environment root, wherever the root
// lives. Paths are validated by the data plane (actuation.ValidateRelativePath)
// before any call; implementations check them again. Errors carry fsaccess's
// codes (or refusal's) so they map onto the same responses.
type Files interface {
	// Snapshot lists rel ("" = the root) within lim.
	Snapshot(ctx context.Context, rel string, lim fsaccess.SnapshotLimits) (*fsaccess.Snapshot, error)
	// Read returns at most maxBytes of the regular file rel from offset.
	Read(ctx context.Context, rel string, offset int64, maxBytes int) (*fsaccess.ReadResult, error)
}

// HostFiles is the Files of a host directory opened as an fsaccess root (nil for
// a nil root): fsaccess.Host, the host implementation of the one file-access
// interface (fsaccess.Files).
func HostFiles(r *fsaccess.Root) Files {
	if r == nil {
		return nil
	}
	return fsaccess.Host(r)
}

// Terminal is what the data plane needs of a session: a *session.Session (a PTY program)
// or a structured-only session, whose event ring records its commands' output.
type Terminal interface {
	Screen() session.Snapshot
	Events() *ring.Ring
	Input(b []byte) error
	Resize(rows, cols uint16) error
	Signal(sig syscall.Signal) error
	Phase() session.Phase
}

var _ Terminal = (*session.Session)(nil)

// The wire bodies of the session routes live in the protocol package (the aggregated
// API server and clients read the same types).
type (
	ScreenResponse = protocol.ScreenResponse
	Cursor         = protocol.Cursor
	ResizeRequest  = protocol.ResizeRequest
	SignalRequest  = protocol.SignalRequest
	SessionEvent   = protocol.SessionEvent
)

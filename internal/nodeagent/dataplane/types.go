package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"time"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
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
	Read(cursor uint64, max int) ([]ring.Event, uint64, *ring.Gap)
	WaitEvents(ctx context.Context, afterSeq uint64) error
	Input(b []byte) error
	Resize(rows, cols uint16) error
	Signal(sig syscall.Signal) error
	Phase() session.Phase
}

var _ Terminal = (*session.Session)(nil)

// Route paths (Go 1.22 ServeMux patterns). Namespace and name come from the
// URL; the methods are part of the pattern.
const (
	sessionPrefix = "/v1/namespaces/{ns}/terminalsessions/{name}/"
	envPrefix     = "/v1/namespaces/{ns}/environments/{name}/"
)

// SessionPath returns the URL path of a terminal-session subresource
// ("screen", "events", "input", "resize", "signal").
func SessionPath(ns, name, subresource string) string {
	return fmt.Sprintf("/v1/namespaces/%s/terminalsessions/%s/%s", url.PathEscape(ns), url.PathEscape(name), url.PathEscape(subresource))
}

// FilesPath returns the URL path of an environment file operation
// ("snapshot" or "read").
func FilesPath(ns, env, op string) string {
	return fmt.Sprintf("/v1/namespaces/%s/environments/%s/files/%s", url.PathEscape(ns), url.PathEscape(env), url.PathEscape(op))
}

// ScreenResponse is GET .../screen: a bounded viewport of the screen model.
type ScreenResponse struct {
	Rows         int      `json:"rows"`
	Cols         int      `json:"cols"`
	Lines        []string `json:"lines"`
	Cursor       Cursor   `json:"cursor"`
	AltScreen    bool     `json:"altScreen"`
	Seq          uint64   `json:"seq"`
	Digest       string   `json:"digest"`
	OutputDigest string   `json:"outputDigest"`
	OutputBytes  uint64   `json:"outputBytes"`
	Phase        string   `json:"phase"`
}

// Cursor is the 0-based cursor position.
type Cursor struct {
	Row    int  `json:"row"`
	Col    int  `json:"col"`
	Hidden bool `json:"hidden"`
}

// Event is one ring event. Data (base64 in JSON) is set for output, resize,
// signal, exit, gap and status events; input events carry only Bytes.
type Event struct {
	Seq   uint64    `json:"seq"`
	Time  time.Time `json:"time"`
	Kind  ring.Kind `json:"kind"`
	Data  []byte    `json:"data,omitempty"`
	Bytes int       `json:"bytes"`
}

// Gap reports that events FromSeq..ToSeq were evicted before the caller read
// them; the returned events start after ToSeq.
type Gap struct {
	FromSeq uint64 `json:"fromSeq"`
	ToSeq   uint64 `json:"toSeq"`
}

// EventsResponse is GET .../events. Pass Next as the following cursor.
type EventsResponse struct {
	Events  []Event `json:"events"`
	Next    uint64  `json:"next"`
	Gap     *Gap    `json:"gap,omitempty"`
	LastSeq uint64  `json:"lastSeq"`
	// Closed: the ring is closed and the caller has read everything; no
	// further event will ever arrive.
	Closed bool   `json:"closed"`
	Phase  string `json:"phase"`
}

// InputRequest is the body of POST .../input.
type InputRequest struct {
	Data []byte `json:"data"` // base64 in JSON, at most Limits.MaxInputBytes decoded
}

// InputResponse acknowledges queued input (202).
type InputResponse struct {
	QueuedBytes int `json:"queuedBytes"`
}

// ResizeRequest is the body of POST .../resize (and its 200 response).
type ResizeRequest struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// SignalRequest is the body of POST .../signal (and its 200 response). Signal
// is one of Signals' keys.
type SignalRequest struct {
	Signal string `json:"signal"`
}

// ReadResponse is GET .../files/read: a bounded window of one regular file.
type ReadResponse struct {
	fsaccess.ReadResult
	Data []byte `json:"data"` // base64 in JSON
}

// Package protocol is the wire contract of the node data plane (version v2): the paths
// under /v2/namespaces/{ns}/..., the forwarded-identity and command-state headers, the
// bounds a caller may ask for, and the metav1.Status body every refusal carries.
//
// Two components speak it: the node agent serves it (internal/nodeagent/dataplane) and
// the aggregated API server (internal/apiserver, workbench-apiserver) forwards to it.
// Both import this package and nothing of the other, as host and guest share
// guest/protocol/v1. It imports neither api/ nor the node agent; its one Kubernetes
// import is metav1, because the status body IS a Kubernetes Status (kubectl and
// client-go read it as one).
package protocol

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sensorium.dev/workbench/internal/actuation"
)

// SubresourceGroup is the API group of the aggregated subresource API.
const SubresourceGroup = "subresources.workbench.sensorium.dev"

// PathPrefix is the route pattern prefix of every v2 path ({ns} is the namespace).
const PathPrefix = "/v2/namespaces/{ns}/"

// V2Path returns the v2 path of resource/name/subresource in ns.
func V2Path(ns, resource, name, subresource string) string {
	return "/v2/namespaces/" + ns + "/" + resource + "/" + name + "/" + subresource
}

// Forwarded identity: the aggregated API server calls the data plane over mutual TLS with
// its own client certificate and names the end user in these headers (the requestheader
// convention of kube-apiserver's front proxy). The data plane honours them ONLY from a
// client certificate it was configured to trust; identity headers from any other peer are
// refused, never ignored.
const (
	HeaderRemoteUser        = "X-Remote-User"
	HeaderRemoteUID         = "X-Remote-Uid"
	HeaderRemoteGroup       = "X-Remote-Group"
	HeaderRemoteExtraPrefix = "X-Remote-Extra-"
)

// MaxForwardedGroups and MaxForwardedExtra bound the forwarded identity.
const (
	MaxForwardedGroups = 256
	MaxForwardedExtra  = 64
)

// SetForwardedUser writes u as identity headers on h (the aggregated server's side),
// removing any identity header h already held.
func SetForwardedUser(h http.Header, user, uid string, groups []string, extra map[string][]string) {
	for k := range h {
		ck := http.CanonicalHeaderKey(k)
		if ck == HeaderRemoteUser || ck == HeaderRemoteGroup || ck == HeaderRemoteUID || strings.HasPrefix(ck, HeaderRemoteExtraPrefix) {
			h.Del(k)
		}
	}
	h.Set(HeaderRemoteUser, user)
	if uid != "" {
		h.Set(HeaderRemoteUID, uid)
	}
	for _, g := range groups {
		h.Add(HeaderRemoteGroup, g)
	}
	for k, vs := range extra {
		for _, v := range vs {
			h.Add(HeaderRemoteExtraPrefix+url.PathEscape(k), v)
		}
	}
}

// CommandEndedPrefix starts the message of the final Failure status of an output stream
// whose command ended without an exit code (Cancelled, timed out, refused): clients tell
// it from a cut stream by it.
const CommandEndedPrefix = "terminal command ended: "

// Output start states (header CommandStateHeader of terminalcommands/output).
const (
	CommandStateHeader     = "X-Workbench-Command-State"
	CommandStateStarted    = "Started"
	CommandStateNotStarted = "NotStarted"
	CommandStateEnded      = "Ended"
	// DefaultStartWait bounds how long output?follow=true waits for a command to start
	// before answering (below kube-apiserver's default 60 s request timeout);
	// ?startWaitSeconds chooses another bound up to MaxStartWait.
	DefaultStartWait = 45 * time.Second
	MaxStartWait     = 10 * time.Minute
)

// Remote command WebSocket subprotocols (kubectl exec's) the attach route speaks.
const (
	ProtocolV5 = "v5.channel.k8s.io"
	ProtocolV4 = "v4.channel.k8s.io"
)

// HTTPStatusOf maps a stable refusal code to its HTTP status. Codes not listed are
// refusals of the request's content and map to 400.
func HTTPStatusOf(code string) int {
	switch actuation.Code(code) {
	case actuation.CodeUnauthenticated:
		return http.StatusUnauthorized
	case actuation.CodeForbidden, actuation.CodeRawInputDisabled, actuation.CodeSymlinkEscape:
		return http.StatusForbidden
	case actuation.CodeNotFound, actuation.CodePathNotFound:
		return http.StatusNotFound
	case actuation.CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case actuation.CodeSessionNotRunning:
		return http.StatusConflict
	case actuation.CodeBodyTooLarge, actuation.CodeInputTooLarge:
		return http.StatusRequestEntityTooLarge
	case actuation.CodeQueueFull, actuation.CodeReaderCapReached:
		return http.StatusTooManyRequests
	case actuation.CodeUnavailable, actuation.CodeOpenat2Unavailable, actuation.CodeInterrupted,
		actuation.CodeEnvironmentUnavailable, actuation.CodeVMNotRunning:
		return http.StatusServiceUnavailable
	case actuation.CodeInternal:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// statusReasons maps the HTTP statuses of refusals to their metav1 reasons; any other is
// BadRequest.
var statusReasons = map[int]metav1.StatusReason{
	http.StatusUnauthorized:          metav1.StatusReasonUnauthorized,
	http.StatusForbidden:             metav1.StatusReasonForbidden,
	http.StatusNotFound:              metav1.StatusReasonNotFound,
	http.StatusConflict:              metav1.StatusReasonConflict,
	http.StatusGone:                  metav1.StatusReasonGone,
	http.StatusUnprocessableEntity:   metav1.StatusReasonInvalid,
	http.StatusRequestEntityTooLarge: metav1.StatusReasonRequestEntityTooLarge,
	http.StatusTooManyRequests:       metav1.StatusReasonTooManyRequests,
	http.StatusMethodNotAllowed:      metav1.StatusReasonMethodNotAllowed,
	http.StatusServiceUnavailable:    metav1.StatusReasonServiceUnavailable,
	http.StatusInternalServerError:   metav1.StatusReasonInternalError,
}

// StatusFor is the metav1.Status of a refusal on the v2 routes (and the aggregated API):
// the stable code is details.causes[0].type and the prefix of message.
func StatusFor(status int, code, message string) *metav1.Status {
	reason, ok := statusReasons[status]
	if !ok {
		reason = metav1.StatusReasonBadRequest
	}
	if !strings.HasPrefix(message, code+": ") {
		message = code + ": " + message
	}
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(status), Reason: reason, Message: message,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseType(code), Message: message}}},
	}
}

// CodeOfStatus returns the stable refusal code a Status carries (details.causes[0].type),
// or "" when it carries none.
func CodeOfStatus(st *metav1.Status) string {
	if st == nil || st.Details == nil || len(st.Details.Causes) == 0 {
		return ""
	}
	return string(st.Details.Causes[0].Type)
}

// ScreenResponse is GET .../terminalsessions/{name}/screen: a bounded viewport of the
// screen model.
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

// ResizeRequest is the body of POST .../resize (and its 200 response).
type ResizeRequest struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// SignalRequest is the body of POST .../signal (and its 200 response): one of the
// signal names the route accepts (SIGINT, SIGTERM, ...).
type SignalRequest struct {
	Signal string `json:"signal"`
}

// SessionEvent is one line of the event stream (GET .../events, JSON Lines): UTF-8 text
// in Text, anything else in DataBase64 (never both). A "gap" line (From..To) reports
// events evicted before the reader got them.
type SessionEvent struct {
	Seq        uint64    `json:"seq,omitempty"`
	Time       time.Time `json:"time,omitzero"`
	Type       string    `json:"type"`
	Text       string    `json:"text,omitempty"`
	DataBase64 []byte    `json:"dataBase64,omitempty"`
	Bytes      int       `json:"bytes,omitempty"`
	Rows       int       `json:"rows,omitempty"`
	Cols       int       `json:"cols,omitempty"`
	Signal     string    `json:"signal,omitempty"`
	ExitCode   *int      `json:"exitCode,omitempty"`
	Phase      string    `json:"phase,omitempty"`
	From       uint64    `json:"from,omitempty"`
	To         uint64    `json:"to,omitempty"`
}

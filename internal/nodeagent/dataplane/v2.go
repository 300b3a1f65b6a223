package dataplane

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
)

// The v2 routes serve the aggregated subresource API (docs/api-subresources.md) with the
// same paths after the namespace, so workbench-apiserver forwards a request by swapping
// the prefix. Errors are metav1.Status bodies whose details.causes[0].reason is the stable
// code. Every route is authorized with SubjectAccessReview in group protocol.SubresourceGroup.
//
//	GET  /v2/namespaces/{ns}/terminalsessions/{name}/attach   get (read-only) / create (stdin)
//	GET  /v2/namespaces/{ns}/terminalsessions/{name}/screen   get
//	GET  /v2/namespaces/{ns}/terminalsessions/{name}/events   get   (JSON Lines)
//	POST /v2/namespaces/{ns}/terminalsessions/{name}/resize   create
//	POST /v2/namespaces/{ns}/terminalsessions/{name}/signal   create
//	GET  /v2/namespaces/{ns}/terminalcommands/{name}/output   get
//	POST /v2/namespaces/{ns}/terminalcommands/{name}/cancel   create
//	GET  /v2/namespaces/{ns}/environments/{name}/files        get
//	GET  /v2/namespaces/{ns}/artifacts/{name}/download        get
//	POST /v2/namespaces/{ns}/artifacts/{name}/upload          create (PUT: update)
const v2Prefix = protocol.PathPrefix

// Remote command WebSocket protocol (kubectl exec's): channel numbers and subprotocols.
const (
	chanStdin  = 0
	chanStdout = 1
	chanStderr = 2
	chanError  = 3
	chanResize = 4
)

// Stream bounds.
const (
	// MaxOutputLimitBytes caps ?limitBytes of command output (the node's output ceiling).
	MaxOutputLimitBytes = 16 << 20
	// MaxEventLimit caps ?limit of the event stream.
	MaxEventLimit = 100_000
	// StreamWriteTimeout drops a streaming client that does not take a write in time.
	StreamWriteTimeout = 30 * time.Second
)

// AttachAuthorizationRecheck is how often an open attach with stdin re-checks its
// authorization (SubjectAccessReview of create terminalsessions/attach) and the session's
// raw-input mode. A variable so that tests can shorten it.
var AttachAuthorizationRecheck = 30 * time.Second

// v2Signals is the closed set of POST .../signal.
var v2Signals = map[string]syscall.Signal{
	"SIGINT": syscall.SIGINT, "SIGTERM": syscall.SIGTERM, "SIGHUP": syscall.SIGHUP, "SIGQUIT": syscall.SIGQUIT,
	"SIGKILL": syscall.SIGKILL, "SIGTSTP": syscall.SIGTSTP, "SIGCONT": syscall.SIGCONT, "SIGWINCH": syscall.SIGWINCH,
}

func (s *Server) v2Routes(mux *http.ServeMux) {
	sess, cmd, env := v2Prefix+"terminalsessions/{name}/", v2Prefix+"terminalcommands/{name}/", v2Prefix+"environments/{name}/"
	for _, rt := range []struct {
		method, path, verb, resource, sub string
		h                                 handlerFunc
	}{
		// attach decides its verb itself (get, or create with stdin).
		{http.MethodGet, sess + "attach", "", "terminalsessions", "attach", s.v2Attach},
		{http.MethodGet, sess + "screen", "get", "terminalsessions", "screen", s.screen},
		{http.MethodGet, sess + "events", "get", "terminalsessions", "events", s.v2Events},
		{http.MethodPost, sess + "resize", "create", "terminalsessions", "resize", s.resize},
		{http.MethodPost, sess + "signal", "create", "terminalsessions", "signal", s.signalWith(v2Signals)},
		{http.MethodGet, cmd + "output", "get", "terminalcommands", "output", s.v2Output},
		{http.MethodPost, cmd + "cancel", "create", "terminalcommands", "cancel", s.v2Cancel},
		{http.MethodGet, env + "files", "get", "environments", "files", s.v2Files},
		{http.MethodGet, v2Prefix + "artifacts/{name}/download", "get", "artifacts", "download", s.v2Download},
		// PUT is authorized as update, POST as create, as kube-apiserver derives the verb.
		{http.MethodPut, v2Prefix + "artifacts/{name}/upload", "update", "artifacts", "upload", s.v2Upload},
		{http.MethodPost, v2Prefix + "artifacts/{name}/upload", "create", "artifacts", "upload", s.v2Upload},
		// the view stream authorizes itself, uncached, and again while it streams.
		{http.MethodGet, v2Prefix + "terminalviews/{name}/stream", "", "terminalviews", "stream", s.viewStream},
	} {
		mux.Handle(rt.method+" "+rt.path, s.authorizedIn(protocol.SubresourceGroup, rt.verb, rt.resource, rt.sub, rt.h))
		allow := rt.method
		if rt.sub == "upload" {
			if rt.method == http.MethodPost {
				continue // one fallback route for both methods
			}
			allow = "PUT, POST"
		}
		mux.HandleFunc(rt.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, r, errorf(http.StatusMethodNotAllowed, string(actuation.CodeMethodNotAllowed), "method "+r.Method+" is not allowed; use "+allow))
		})
	}
}

// authorize asks the Authorizer for one more access of the request's user.
func (s *Server) authorize(r *http.Request, a Attributes) error {
	u := userFrom(r.Context())
	ctx, cancel := context.WithTimeout(r.Context(), s.lim.RequestTimeout)
	d, err := s.authz.Authorize(ctx, u, a)
	cancel()
	if err != nil {
		return &httpError{status: http.StatusServiceUnavailable, code: string(actuation.CodeUnavailable), message: "authorization is unavailable", cause: err}
	}
	if !d.Allowed {
		msg := fmt.Sprintf("user %q may not %s %s/%s %q in namespace %q", u.Username, a.Verb, a.Resource, a.Subresource, a.Name, a.Namespace)
		if d.Reason != "" {
			msg += ": " + d.Reason
		}
		return errorf(http.StatusForbidden, string(actuation.CodeForbidden), msg)
	}
	return nil
}

// streamingResponse lifts the server's read/write timeouts for a long-lived response.
func streamingResponse(w http.ResponseWriter) *http.ResponseController {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	return rc
}

// queryBool parses an optional boolean parameter.
func queryBool(r *http.Request, key string) (bool, error) {
	v, err := queryString(r.URL.Query(), key)
	if err != nil || v == "" {
		return false, err
	}
	b, perr := strconv.ParseBool(v)
	if perr != nil {
		return false, badRequest("query parameter %s=%q must be true or false", key, v)
	}
	return b, nil
}

// ---- attach ------------------------------------------------------------------------------

// ---- events ------------------------------------------------------------------------------

// ---- signal ------------------------------------------------------------------------------

// ---- files -------------------------------------------------------------------------------

func (s *Server) v2Files(w http.ResponseWriter, r *http.Request, ref objRef) error {
	q := r.URL.Query()
	op, err := queryString(q, "op")
	if err != nil {
		return err
	}
	switch op {
	case "", "snapshot":
		return s.snapshot(w, r, ref)
	case "read":
	default:
		return badRequest("query parameter op=%q must be snapshot or read", op)
	}
	res, err := s.readRange(r, ref, "limit")
	if err != nil {
		return err
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	if res.Digest != "" {
		hd.Set("X-Workbench-Digest", res.Digest)
	}
	hd.Set("X-Workbench-Size", strconv.FormatInt(res.Size, 10))
	hd.Set("X-Workbench-Truncated", strconv.FormatBool(!res.EOF))
	hd.Set("Content-Length", strconv.Itoa(len(res.Data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(res.Data)
	return nil
}

// ---- command output and cancel -----------------------------------------------------------

// ---- artifacts ---------------------------------------------------------------------------

package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/nodeagent/ring"
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

// CommandResolver finds TerminalCommands on this node.
type CommandResolver interface {
	Command(ns, name string) (Command, error)
}

// Command is a structured command's output view and control.
type Command interface {
	// Ring is the event ring of the command's session, which records the command's output.
	Ring() *ring.Ring
	// SeqFrom is the first ring sequence number that can hold the command's output.
	SeqFrom() uint64
	// Done is closed once the command is final.
	Done() <-chan struct{}
	// Result is the final state (valid once Done is closed).
	Result() CommandResult
	// Cancel ends the command (process group terminated, outcome Cancelled).
	Cancel() error
}

// NotStartedError is what a CommandResolver returns for a TerminalCommand that exists but
// has not run on this node: not yet, or never (Final: it ended before starting, Phase).
type NotStartedError struct {
	Final bool
	Phase string
}

func (e *NotStartedError) Error() string {
	if e.Final {
		return "the command ended (" + e.Phase + ") without starting"
	}
	return "the command has not started yet"
}

// CommandWatcher is implemented by a CommandResolver that can tell when to look again:
// the channel is closed at the next change of any command on the node (one started, one's
// object changed).
type CommandWatcher interface {
	CommandsChanged() <-chan struct{}
}

// SessionWatcher is implemented by a Resolver that can tell when a session may have
// changed: the channel is closed after the next change of any session on the node. An
// open attach with stdin re-checks the session's raw-input mode then (and its
// authorization every AttachAuthorizationRecheck, which no node-side event announces).
type SessionWatcher interface {
	SessionsChanged() <-chan struct{}
}

// CommandResult is a final command's state.
type CommandResult struct {
	Phase string
	// SeqTo is the last ring sequence number holding the command's output (0: none).
	SeqTo       uint64
	ExitCode    *int32
	RefusalCode string
	Message     string
}

// SessionEventOf converts a ring event.
func SessionEventOf(e ring.Event) SessionEvent {
	ev := SessionEvent{Seq: e.Seq, Time: e.Time.UTC(), Type: string(e.Kind), Bytes: e.Bytes}
	d := string(e.Data)
	switch e.Kind {
	case ring.KindOutput, ring.KindGap:
		if utf8.Valid(e.Data) {
			ev.Text = d
		} else {
			ev.DataBase64 = e.Data
		}
	case ring.KindResize:
		r, c, _ := strings.Cut(d, "x")
		ev.Rows, _ = strconv.Atoi(r)
		ev.Cols, _ = strconv.Atoi(c)
	case ring.KindSignal:
		ev.Signal = d
	case ring.KindExit:
		if v, ok := strings.CutPrefix(d, "exit="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				ev.ExitCode = &n
			}
		} else if v, ok := strings.CutPrefix(d, "signal="); ok {
			ev.Signal = v
		}
		ev.Text = d
	case ring.KindStatus:
		ev.Phase = d
	default:
		if utf8.Valid(e.Data) {
			ev.Text = d
		} else {
			ev.DataBase64 = e.Data
		}
	}
	return ev
}

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

// v2Attach serves the remote command WebSocket protocol on a session: stdin (create
// terminalsessions/attach and spec.rawInput OperatorOnly), stdout from the ring (output
// from now on), resize, and a metav1.Status on the error channel when the program ends.
func (s *Server) v2Attach(w http.ResponseWriter, r *http.Request, ref objRef) error {
	stdin, err := queryBool(r, "stdin")
	if err != nil {
		return err
	}
	verb := "get"
	if stdin {
		verb = "create"
	}
	if err := s.authorize(r, Attributes{Group: protocol.SubresourceGroup, Verb: verb, Namespace: ref.ns, Resource: "terminalsessions", Subresource: "attach", Name: ref.name}); err != nil {
		return err
	}
	if !wsstream.IsWebSocketRequest(r) {
		return badRequest("attach needs a WebSocket upgrade with subprotocol %s or %s", protocol.ProtocolV5, protocol.ProtocolV4)
	}
	h, err := s.resolveSession(ref)
	if err != nil {
		return err
	}
	if stdin && h.info.RawInput != wbv1.RawInputOperatorOnly {
		mode := h.info.RawInput
		if mode == "" {
			mode = wbv1.RawInputDisabled
		}
		return errorf(http.StatusForbidden, string(actuation.CodeRawInputDisabled),
			fmt.Sprintf("terminal session %s has spec.rawInput %s; attaching with stdin requires %s", ref, mode, wbv1.RawInputOperatorOnly))
	}
	if stdin && h.s.Phase().Terminal() {
		return errorf(http.StatusConflict, string(actuation.CodeSessionNotRunning),
			fmt.Sprintf("terminal session %s is %s; it takes no more input", ref, h.s.Phase()))
	}
	release, err := s.acquireStream(r.Context(), ref.ns, false)
	if err != nil {
		return err
	}
	defer release()
	streamingResponse(w)
	s.serveAttach(w, r, ref, h, stdin)
	return nil
}

// writeRemoteStatus writes the final metav1.Status of a remote command stream.
func writeRemoteStatus(w io.Writer, exit *int, failure string) {
	_, _ = w.Write(remoteStatus(exit, failure))
}

// remoteStatus is the final metav1.Status of a remote command stream, encoded.
func remoteStatus(exit *int, failure string) []byte {
	st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess}
	switch {
	case failure != "":
		st.Status, st.Message = metav1.StatusFailure, failure
		st.Reason = metav1.StatusReasonInternalError
	case exit != nil && *exit != 0:
		st.Status, st.Reason = metav1.StatusFailure, "NonZeroExitCode"
		st.Message = fmt.Sprintf("command terminated with non-zero exit code: %d", *exit)
		st.Details = &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: "ExitCode", Message: strconv.Itoa(*exit)}}}
	}
	raw, _ := json.Marshal(st)
	return raw
}

// ---- events ------------------------------------------------------------------------------

// v2Events streams session events as JSON Lines from ?since (exclusive); ?follow keeps the
// stream open until the ring closes; ?limit bounds the count.
func (s *Server) v2Events(w http.ResponseWriter, r *http.Request, ref objRef) error {
	q := r.URL.Query()
	since, err := queryUint(q, "since", 0, math.MaxUint64)
	if err != nil {
		return err
	}
	limit, err := queryUint(q, "limit", 0, MaxEventLimit)
	if err != nil {
		return err
	}
	follow, err := queryBool(r, "follow")
	if err != nil {
		return err
	}
	if limit == 0 {
		limit = MaxEventLimit
		if !follow {
			limit = uint64(s.lim.MaxEventsPerRead)
		}
	}
	h, err := s.resolveSession(ref)
	if err != nil {
		return err
	}
	rg := h.s.Events()
	if last := rg.LastSeq(); since > last {
		return badRequest("since %d is ahead of the last event %d", since, last)
	}
	if follow {
		release, err := s.acquireStream(r.Context(), ref.ns, false)
		if err != nil {
			return err
		}
		defer release()
	}
	rc := streamingResponse(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	cursor, sent := since, uint64(0)
	for sent < limit {
		evs, next, gap := rg.Read(cursor, int(min(limit-sent, uint64(s.lim.MaxEventsPerRead))))
		_ = rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
		if gap != nil {
			if enc.Encode(SessionEvent{Type: "gap", From: gap.FromSeq, To: gap.ToSeq}) != nil {
				return nil
			}
		}
		for _, e := range evs {
			if enc.Encode(SessionEventOf(e)) != nil {
				return nil
			}
		}
		sent += uint64(len(evs))
		cursor = next
		if rc.Flush() != nil {
			return nil
		}
		if len(evs) > 0 || gap != nil {
			continue
		}
		if !follow {
			return nil
		}
		if s.waitHook != nil {
			s.waitHook()
		}
		if err := rg.Wait(r.Context(), cursor); err != nil {
			return nil // closed ring or a finished request both end the stream
		}
	}
	return nil
}

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

func (s *Server) resolveCommand(ref objRef) (Command, error) {
	if s.cmds == nil {
		return nil, fmt.Errorf("terminal command %s: %w", ref, ErrNotFound)
	}
	c, err := s.cmds.Command(ref.ns, ref.name)
	if err != nil {
		return nil, fmt.Errorf("resolving terminal command %s: %w", ref, err)
	}
	if c == nil {
		return nil, fmt.Errorf("resolving terminal command %s: %w", ref, ErrNotFound)
	}
	return c, nil
}

func (s *Server) v2Cancel(w http.ResponseWriter, _ *http.Request, ref objRef) error {
	c, err := s.resolveCommand(ref)
	if err != nil {
		return err
	}
	if err := c.Cancel(); err != nil {
		return fmt.Errorf("cancelling terminal command %s: %w", ref, err)
	}
	writeJSON(w, http.StatusOK, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusSuccess, Message: "terminal command " + ref.String() + " cancelled"})
	return nil
}

// outputSink receives command output: the HTTP body or the WebSocket stdout channel.
type outputSink interface {
	write(p []byte) error
	flush() error
}

type httpSink struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (h httpSink) write(p []byte) error {
	_ = h.rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
	_, err := h.w.Write(p)
	return err
}
func (h httpSink) flush() error { return h.rc.Flush() }

type wsSink struct{ w io.Writer }

func (s wsSink) write(p []byte) error { _, err := s.w.Write(p); return err }
func (wsSink) flush() error           { return nil }

// v2Output streams a command's combined output from its first byte: plain (chunked) or over
// the remote command WebSocket protocol (stdout, then a metav1.Status with the exit code).
func (s *Server) v2Output(w http.ResponseWriter, r *http.Request, ref objRef) error {
	q := r.URL.Query()
	follow, err := queryBool(r, "follow")
	if err != nil {
		return err
	}
	limit, err := queryUint(q, "limitBytes", MaxOutputLimitBytes, MaxOutputLimitBytes)
	if err != nil {
		return err
	}
	if limit == 0 {
		limit = MaxOutputLimitBytes
	}
	offset, err := queryUint(q, "offset", 0, MaxOutputLimitBytes)
	if err != nil {
		return err
	}
	startWait, err := queryUint(q, "startWaitSeconds", 0, uint64(protocol.MaxStartWait/time.Second))
	if err != nil {
		return err
	}
	wait := protocol.DefaultStartWait
	if q.Has("startWaitSeconds") {
		wait = time.Duration(startWait) * time.Second
	}
	ws := wsstream.IsWebSocketRequest(r)
	if follow || ws {
		release, err := s.acquireStream(r.Context(), ref.ns, false)
		if err != nil {
			return err
		}
		defer release()
	}
	c, err := s.resolveCommand(ref)
	var ns *NotStartedError
	if errors.As(err, &ns) && follow && !ns.Final {
		c, err = s.awaitCommandStart(r.Context(), ref, wait)
	}
	if errors.As(err, &ns) {
		// Not started (plain GET, or the bounded wait ended) or never will: no output.
		state := protocol.CommandStateNotStarted
		if ns.Final {
			state = protocol.CommandStateEnded
		}
		if ws {
			return errorf(http.StatusConflict, string(actuation.CodeCommandNotStarted), fmt.Sprintf("terminal command %s: %v", ref, ns))
		}
		w.Header().Set(protocol.CommandStateHeader, state)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		return nil
	}
	if err != nil {
		return err
	}
	w.Header().Set(protocol.CommandStateHeader, protocol.CommandStateStarted)
	rc := streamingResponse(w)
	if !ws {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_, _ = s.copyOutput(r.Context(), c, httpSink{w, rc}, follow, offset, limit)
		return nil
	}
	chans := []wsstream.ChannelType{wsstream.IgnoreChannel, wsstream.WriteChannel, wsstream.IgnoreChannel, wsstream.WriteChannel, wsstream.ReadChannel}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		protocol.ProtocolV5: {Binary: true, Channels: chans},
		protocol.ProtocolV4: {Binary: true, Channels: chans},
	})
	_, streams, err := conn.Open(w, r)
	if err != nil {
		return nil
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() { // the resize channel ends with the connection
		defer cancel()
		_, _ = io.Copy(io.Discard, streams[chanResize])
	}()
	final, err := s.copyOutput(ctx, c, wsSink{streams[chanStdout]}, follow, offset, limit)
	switch {
	case err != nil:
		writeRemoteStatus(streams[chanError], nil, err.Error())
	case final != nil && final.ExitCode != nil:
		code := int(*final.ExitCode)
		writeRemoteStatus(streams[chanError], &code, "")
	case final != nil && final.Phase != string(wbv1.CommandSucceeded):
		writeRemoteStatus(streams[chanError], nil, protocol.CommandEndedPrefix+final.Phase+": "+final.Message)
	default:
		writeRemoteStatus(streams[chanError], nil, "")
	}
	return nil
}

// awaitCommandStart resolves ref again at every change of the node's commands until it has
// started, ended, or wait has passed (then the last NotStartedError).
func (s *Server) awaitCommandStart(ctx context.Context, ref objRef, wait time.Duration) (Command, error) {
	cw, ok := s.cmds.(CommandWatcher)
	if !ok {
		return s.resolveCommand(ref)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		changed := cw.CommandsChanged()
		c, err := s.resolveCommand(ref)
		var ns *NotStartedError
		if !errors.As(err, &ns) || ns.Final {
			return c, err
		}
		select {
		case <-changed:
		case <-t.C:
			return nil, err
		case <-ctx.Done():
			return nil, err
		}
	}
}

// copyOutput writes the command's output events to sink from SeqFrom on, skipping the
// first offset bytes (a resumed read). Without follow it
// stops at what exists now; with follow it ends when the command is final and all of its
// output is written. It returns the final result when the command ended.
func (s *Server) copyOutput(ctx context.Context, c Command, sink outputSink, follow bool, offset, limit uint64) (*CommandResult, error) {
	rg := c.Ring()
	cursor := c.SeqFrom()
	if cursor > 0 {
		cursor--
	}
	var written uint64
	done := c.Done()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // a final command ends a parked wait
		select {
		case <-done:
			cancel()
		case <-wctx.Done():
		}
	}()
	for {
		final := false
		var res CommandResult
		select {
		case <-done:
			final, res = true, c.Result()
		default:
		}
		evs, next, gap := rg.Read(cursor, s.lim.MaxEventsPerRead)
		if gap != nil && (!final || gap.FromSeq <= res.SeqTo) {
			return nil, errorf(http.StatusGone, string(actuation.CodeOutputEvicted),
				fmt.Sprintf("output events %d..%d left the node's event ring", gap.FromSeq, gap.ToSeq))
		}
		stop := false
		for _, e := range evs {
			if final && e.Seq > res.SeqTo {
				stop = true
				break
			}
			cursor = e.Seq
			if e.Kind != ring.KindOutput {
				continue
			}
			data := e.Data
			if offset > 0 { // resumed: skip what the client has
				skip := min(offset, uint64(len(data)))
				data, offset = data[skip:], offset-skip
				if len(data) == 0 {
					continue
				}
			}
			if rest := limit - written; uint64(len(data)) > rest {
				data = data[:rest]
			}
			if err := sink.write(data); err != nil {
				return nil, nil
			}
			written += uint64(len(data))
			if written >= limit {
				_ = sink.flush()
				return nil, nil
			}
		}
		if len(evs) == 0 {
			cursor = max(cursor, next)
		}
		if sink.flush() != nil {
			return nil, nil
		}
		if final && (stop || len(evs) == 0 || cursor >= res.SeqTo) {
			return &res, nil
		}
		if len(evs) > 0 {
			continue
		}
		if !follow {
			return nil, nil
		}
		err := rg.Wait(wctx, cursor)
		switch {
		case err == nil:
		case errors.Is(err, ring.ErrClosed):
			select { // the session closed: the command ends with it
			case <-done:
			case <-ctx.Done():
				return nil, nil
			}
		case ctx.Err() != nil:
			return nil, nil
		}
	}
}

// ---- artifacts ---------------------------------------------------------------------------

// ArtifactResolver opens the stored blob of an Artifact bound to this node.
type ArtifactResolver interface {
	// OpenArtifact returns the verified blob, its digest ("sha256:...") and size.
	OpenArtifact(ns, name string) (io.ReadCloser, string, int64, error)
	// ArtifactClassification returns the Artifact's spec.classification ("" for none).
	ArtifactClassification(ns, name string) (string, error)
}

// authorizeClassification asks, for an artifact whose classification needs more than the
// download route's "get" (actuation.ArtifactDownloadVerb: confidential, restricted, or a
// class the node does not know), whether the caller holds that virtual verb on
// artifacts/download; a caller without it is refused with artifact-classification-forbidden
// and reads nothing.
func (s *Server) authorizeClassification(r *http.Request, ref objRef) error {
	class, err := s.arts.ArtifactClassification(ref.ns, ref.name)
	if err != nil {
		return fmt.Errorf("reading the classification of artifact %s: %w", ref, err)
	}
	verb := actuation.ArtifactDownloadVerb(class)
	if verb == "" {
		return nil
	}
	err = s.authorize(r, Attributes{Group: protocol.SubresourceGroup, Verb: verb, Namespace: ref.ns, Resource: "artifacts", Subresource: "download", Name: ref.name})
	var he *httpError
	if errors.As(err, &he) && he.status == http.StatusForbidden {
		return errorf(http.StatusForbidden, string(actuation.CodeArtifactClassificationForbidden),
			fmt.Sprintf("artifact %s is classified %s: downloading it needs the verb %q on artifacts/download (%s)", ref, class, verb, he.message))
	}
	return err
}

// v2Download streams an artifact's blob with its digest and length.
func (s *Server) v2Download(w http.ResponseWriter, r *http.Request, ref objRef) error {
	if s.arts == nil {
		return fmt.Errorf("artifact %s: %w", ref, ErrNotFound)
	}
	if err := s.authorizeClassification(r, ref); err != nil {
		return err
	}
	rc, digest, size, err := s.arts.OpenArtifact(ref.ns, ref.name)
	if err != nil {
		return fmt.Errorf("opening artifact %s: %w", ref, err)
	}
	defer func() { _ = rc.Close() }()
	ctl := streamingResponse(w)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Workbench-Digest", digest)
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := rc.Read(buf)
		if n > 0 {
			_ = ctl.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
			if _, err := w.Write(buf[:n]); err != nil {
				return nil
			}
		}
		if rerr != nil {
			return nil
		}
	}
}

// MaxUploadBytes caps one artifact upload (the node's artifact cap): a larger body is
// refused with 413 upload-too-large and nothing is stored.
const MaxUploadBytes = 64 << 20

// ArtifactUploader stores the uploaded blob of an Artifact with spec.source upload bound
// to this node and records its digest and size in the Artifact's status.
type ArtifactUploader interface {
	// UploadArtifact reads at most maxBytes from body (a refusal with code
	// upload-too-large above it). It refuses not-found (no such Artifact on this node),
	// invalid-spec (spec.source is not upload) and immutable (content already recorded, or
	// an upload in progress) with their codes.
	UploadArtifact(ctx context.Context, ns, name string, body io.Reader, maxBytes int64) (digest string, size int64, err error)
}

// v2Upload stores the request body as the blob of an upload Artifact.
func (s *Server) v2Upload(w http.ResponseWriter, r *http.Request, ref objRef) error {
	up, ok := s.arts.(ArtifactUploader)
	if !ok {
		return fmt.Errorf("artifact %s: uploads are not served by this node: %w", ref, ErrNotFound)
	}
	if r.ContentLength > MaxUploadBytes {
		return errorf(http.StatusRequestEntityTooLarge, string(actuation.CodeUploadTooLarge),
			fmt.Sprintf("the upload of %d bytes exceeds the cap of %d bytes", r.ContentLength, MaxUploadBytes))
	}
	streamingResponse(w) // a large body may take longer than the read timeout
	digest, size, err := up.UploadArtifact(r.Context(), ref.ns, ref.name, r.Body, MaxUploadBytes)
	if err != nil {
		switch code := string(actuation.CodeOf(err)); code {
		case string(actuation.CodeUploadTooLarge):
			return errorf(http.StatusRequestEntityTooLarge, code, fmt.Sprintf("the upload exceeds the cap of %d bytes", MaxUploadBytes))
		case string(actuation.CodeImmutable), string(actuation.CodeInvalidSpec):
			return &httpError{status: http.StatusConflict, code: code, message: err.Error()}
		}
		return fmt.Errorf("uploading artifact %s: %w", ref, err)
	}
	writeJSON(w, http.StatusOK, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusSuccess, Code: http.StatusOK,
		Message: fmt.Sprintf("artifact %s stored: %d bytes, %s", ref, size, digest),
		Details: &metav1.StatusDetails{Name: ref.name, Kind: "artifacts"}})
	return nil
}

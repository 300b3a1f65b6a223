package dataplane

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/nodeagent/ring"
)

// SessionWatcher is implemented by a Resolver that can tell when a session may have
// changed: the channel is closed after the next change of any session on the node. An
// open attach with stdin re-checks the session's raw-input mode then (and its
// authorization every AttachAuthorizationRecheck, which no node-side event announces).
type SessionWatcher interface {
	SessionsChanged() <-chan struct{}
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

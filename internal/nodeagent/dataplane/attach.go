package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/net/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/nodeagent/ring"
)

// The attach stream speaks the remote command WebSocket protocol (v5.channel.k8s.io, or
// v4.channel.k8s.io without the stream-close signal) itself, on golang.org/x/net/websocket,
// rather than through wsstream.Conn: wsstream hands every received frame to a pipe that
// another goroutine reads, so each keystroke cost one more goroutine hand-off before it
// reached the terminal. Here the goroutine that receives a stdin frame writes it to the
// session (Session.Input never blocks: what the terminal does not take at once is
// queued, bounded), and the handler's goroutine sends the output: one frame per pass
// over the ring (at most attachFrameBytes), woken by output, the exit or the end — not
// by the keystrokes it forwards itself (ring.WaitNonInput).

// attachFrameBytes bounds one stdout frame of an attach stream.
const attachFrameBytes = 32 << 10

// attachMaxFrame bounds a frame the client sends (stdin data is written in MaxInputBytes
// pieces; resize frames are a few bytes): a larger frame ends the stream.
const attachMaxFrame = 1 << 20

// streamCloseSignal (v5) followed by a channel number half-closes that channel.
const streamCloseSignal = 255

// attachHandshake selects the first subprotocol the client offers that is v5 or v4.
func attachHandshake(cfg *websocket.Config, _ *http.Request) error {
	for _, p := range cfg.Protocol {
		if p == protocol.ProtocolV5 || p == protocol.ProtocolV4 {
			cfg.Protocol = []string{p}
			return nil
		}
	}
	return fmt.Errorf("requested protocol(s) %v are not supported: supports %s and %s", cfg.Protocol, protocol.ProtocolV5, protocol.ProtocolV4)
}

// sendFrame sends data on channel ch as one binary frame.
func sendFrame(ws *websocket.Conn, ch byte, data []byte, scratch *[]byte) error {
	f := append((*scratch)[:0], ch)
	f = append(f, data...)
	*scratch = f
	return websocket.Message.Send(ws, f)
}

// serveAttach upgrades the request and serves the stream until the program ends, the
// client goes, or the stream's authorization is revoked. Authorization was decided
// before; it is re-checked while the stream is open, never per keystroke.
func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request, ref objRef, h sessionHandle, stdin bool) {
	websocket.Server{Handshake: attachHandshake, Handler: func(ws *websocket.Conn) {
		ws.PayloadType = websocket.BinaryFrame
		ws.MaxPayloadBytes = attachMaxFrame
		s.attachStream(ws, r, ref, h, stdin)
	}}.ServeHTTP(w, r)
}

func (s *Server) attachStream(ws *websocket.Conn, r *http.Request, ref objRef, h sessionHandle, stdin bool) {
	defer func() { _ = ws.Close() }()
	v5 := ws.Config().Protocol[0] == protocol.ProtocolV5
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	logger := ctrl.LoggerFrom(r.Context())
	rg := h.s.Events()
	cursor := rg.LastSeq()

	// Resize requests are JSON objects on their channel: decoded from a pipe (they are
	// rare; a request may span frames), by their own goroutine. A resize changes the
	// terminal every other attacher and the program see, so it needs the same authority as
	// POST .../resize (create terminalsessions/resize), decided per request: a read-only
	// attach (or any attacher without it) that sends one is refused — the stream ends with a
	// Failure status carrying the code, and the terminal keeps its size.
	var refused atomic.Pointer[metav1.Status]
	resizeR, resizeW := io.Pipe()
	defer func() { _ = resizeW.Close() }()
	go func() {
		dec := json.NewDecoder(resizeR)
		for {
			var sz struct{ Width, Height uint16 }
			if err := dec.Decode(&sz); err != nil {
				_ = resizeR.CloseWithError(err) // a later resize frame is dropped, not blocked on
				return
			}
			if st := s.resizeRefusal(r, ref); st != nil {
				refused.Store(st)
				_ = resizeR.CloseWithError(errors.New(st.Message))
				cancel()
				return
			}
			if err := h.s.Resize(sz.Height, sz.Width); err != nil {
				logger.V(1).Info("Attach resize refused", "session", ref.String(), "error", err.Error())
			}
		}
	}()

	// Authorization is decided when the stream opens and re-checked while it stays open,
	// never per keystroke: the session's raw-input mode at each change of a session on the
	// node (SessionWatcher), the RBAC decision every AttachAuthorizationRecheck (the node
	// sees no event for a RoleBinding). A revoked binding, or a session whose raw input
	// was turned off, ends the stream's input and the stream.
	var revoked atomic.Pointer[string]
	if stdin {
		go s.recheckAttach(ctx, cancel, r, ref, &revoked)
	}

	// The receiving side: stdin frames go to the session from this goroutine.
	go func() {
		defer cancel() // the client went (or broke the protocol): end the stream
		stdinOpen := stdin
		for {
			var data []byte
			if err := websocket.Message.Receive(ws, &data); err != nil {
				return
			}
			if len(data) == 0 {
				continue
			}
			if v5 && data[0] == streamCloseSignal {
				if len(data) != 2 {
					return
				}
				switch data[1] {
				case chanStdin:
					stdinOpen = false
				case chanResize:
					_ = resizeW.Close()
				}
				continue
			}
			switch data[0] {
			case chanStdin:
				for b := data[1:]; stdinOpen && len(b) > 0 && revoked.Load() == nil; {
					n := min(len(b), s.lim.MaxInputBytes)
					if ierr := h.s.Input(b[:n]); ierr != nil {
						logger.V(1).Info("Attach input refused", "session", ref.String(), "error", ierr.Error())
					}
					b = b[n:]
				}
			case chanResize:
				_, _ = resizeW.Write(data[1:]) // fails once the decoder stopped: dropped
			}
		}
	}()

	// The sending side: output from the ring, then the final status.
	var exit *int
	frame := make([]byte, 0, attachFrameBytes)
	var scratch []byte
	flush := func() error {
		if len(frame) == 0 {
			return nil
		}
		err := sendFrame(ws, chanStdout, frame, &scratch)
		frame = frame[:0]
		return err
	}
	for {
		evs, next, _ := rg.Read(cursor, s.lim.MaxEventsPerRead)
		for _, e := range evs {
			switch e.Kind {
			case ring.KindOutput:
				if len(frame)+len(e.Data) > attachFrameBytes {
					if err := flush(); err != nil {
						return
					}
				}
				frame = append(frame, e.Data...) // an event's data is at most ring.MaxEventData
			case ring.KindExit:
				exit = SessionEventOf(e).ExitCode
			}
		}
		if err := flush(); err != nil {
			return
		}
		cursor = next
		if len(evs) > 0 && ctx.Err() == nil { // an ended stream (refused, revoked) says why now, not after the output pauses
			continue
		}
		if err := rg.WaitNonInput(ctx, cursor); err != nil {
			switch {
			case refused.Load() != nil:
				raw, _ := json.Marshal(refused.Load())
				_ = sendFrame(ws, chanError, raw, &scratch)
			case revoked.Load() != nil:
				_ = sendFrame(ws, chanError, remoteStatus(nil, "attach authorization revoked: "+*revoked.Load()), &scratch)
			case errors.Is(err, ring.ErrClosed):
				_ = sendFrame(ws, chanError, remoteStatus(exit, ""), &scratch)
			}
			return
		}
	}
}

// resizeRefusal is nil when the stream's user may resize the session (create
// terminalsessions/resize, as POST .../resize requires), and otherwise the Failure status
// that ends the stream (protocol.StatusFor: 403 Forbidden, the code as the message's prefix and as
// the first cause's type). An unavailable authorizer refuses too: a resize is never applied unchecked.
func (s *Server) resizeRefusal(r *http.Request, ref objRef) *metav1.Status {
	err := s.authorize(r, Attributes{Group: protocol.SubresourceGroup, Verb: "create", Namespace: ref.ns, Resource: "terminalsessions", Subresource: "resize", Name: ref.name})
	if err == nil {
		return nil
	}
	code, msg, status := string(actuation.CodeUnavailable), err.Error(), http.StatusServiceUnavailable
	var he *httpError
	if errors.As(err, &he) {
		code, msg, status = he.code, he.message, he.status
	}
	return protocol.StatusFor(status, code, msg+": an attach stream without the resize authority cannot resize the terminal")
}

// recheckAttach re-checks an open stdin stream's authorization (see attachStream) and
// cancels the stream with the reason in revoked when it no longer holds.
func (s *Server) recheckAttach(ctx context.Context, cancel context.CancelFunc, r *http.Request, ref objRef, revoked *atomic.Pointer[string]) {
	sw, _ := s.res.(SessionWatcher)
	t := time.NewTicker(AttachAuthorizationRecheck)
	defer t.Stop()
	for {
		var changed <-chan struct{} // nil (never ready) without a SessionWatcher
		if sw != nil {
			changed = sw.SessionsChanged() // taken before the check: no change is missed
		}
		rbac := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rbac = true
		case <-changed:
		}
		msg := ""
		if rbac { // a session event changes the session only: RBAC is asked on the tick
			err := s.authorize(r, Attributes{Group: protocol.SubresourceGroup, Verb: "create", Namespace: ref.ns, Resource: "terminalsessions", Subresource: "attach", Name: ref.name})
			var he *httpError
			switch {
			case err == nil:
			case !errors.As(err, &he) || he.status != http.StatusForbidden:
				continue // authorization unavailable: keep the decision made at open
			default:
				msg = he.Error()
			}
		}
		if msg == "" {
			if cur, err := s.resolveSession(ref); err == nil && cur.info.RawInput != wbv1.RawInputOperatorOnly {
				msg = string(actuation.CodeRawInputDisabled) + ": terminal session " + ref.String() + " no longer takes raw input"
			}
		}
		if msg != "" {
			revoked.Store(&msg)
			cancel()
			return
		}
	}
}

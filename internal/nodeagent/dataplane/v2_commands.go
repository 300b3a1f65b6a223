package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/nodeagent/ring"
)

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

// CommandResult is a final command's state.
type CommandResult struct {
	Phase string
	// SeqTo is the last ring sequence number holding the command's output (0: none).
	SeqTo       uint64
	ExitCode    *int32
	RefusalCode string
	Message     string
}

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

func (wsSink) flush() error { return nil }

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

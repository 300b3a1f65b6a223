package guestclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

// Timing of requests.
const (
	// DefaultDeadline applies when ctx has no deadline.
	DefaultDeadline = 30 * time.Second
	// ReportGrace is how long after a request's deadline the host still waits for its
	// result: the guest starts the deadline when the request arrives and reports an
	// effect it ended at the deadline (e.g. a killed process) just after it. It does not
	// extend the operation, only the wait for its report.
	ReportGrace = 10 * time.Second
)

// Errors.
var (
	// ErrUnknownOutcome: the outcome of an admitted effect cannot be proved (the guest
	// said so, or its answer did not arrive). Never returned for a refusal.
	ErrUnknownOutcome = errors.New("guestclient: outcome unknown")
	// ErrProtocol: the guest sent something that violates the protocol; the channel is
	// closed.
	ErrProtocol = errors.New("guestclient: guest protocol violation")
	// ErrBroken: the channel was closed by an earlier failure.
	ErrBroken = errors.New("guestclient: channel closed")
	// ErrGuestRefused is the Cause of every *actuation.Refusal this package returns: the
	// guest's refusal (an error frame or a refused result, converted here from its wire
	// code and message), or a refusal of the guest protocol's rules made on this side
	// (arguments checked before sending, which carry the code the guest would answer, and
	// a guest answer refused while it is read). It tells a refusal in the guest's words
	// from the broker's or the host's own (GuestCode), by a marker, not by a type.
	ErrGuestRefused = errors.New("guest protocol refusal")
)

// GuestCode returns the code of err's first refusal when that refusal came from the guest
// protocol (its Cause is ErrGuestRefused and holds no other refusal), or "" when err
// carries no refusal or its first one is the broker's or the host's (e.g. a node refusal
// that wraps a guest one it was mapped from).
func GuestCode(err error) actuation.Code {
	var r *actuation.Refusal
	if !errors.As(err, &r) || r == nil || !errors.Is(r.Cause, ErrGuestRefused) || actuation.CodeOf(r.Cause) != "" {
		return ""
	}
	return r.Code
}

// fromWire converts a refusal's wire code and message (an error frame, a refused result)
// into the tree's refusal. A code outside actuation's closed vocabulary is a protocol
// violation: an untrusted guest does not extend the vocabulary the node reports.
func fromWire(code, message string) error {
	c := actuation.Code(code)
	if !actuation.IsKnownCode(c) {
		return fmt.Errorf("%w: refusal code %q outside the vocabulary", ErrProtocol, protocol.Truncate(code))
	}
	return &actuation.Refusal{Code: c, Message: protocol.Truncate(message), Cause: ErrGuestRefused}
}

// refusef builds a refusal of the guest protocol's rules made on this side.
func refusef(code actuation.Code, format string, args ...any) *actuation.Refusal {
	return &actuation.Refusal{Code: code, Message: fmt.Sprintf(format, args...), Cause: ErrGuestRefused}
}

// marked marks the first refusal in err, one the protocol package's checks returned (a
// fresh value per call, owned by the caller), as a guest protocol refusal. Errors
// without a refusal, and refusals with a cause of their own, are returned as they are.
func marked(err error) error {
	var r *actuation.Refusal
	if errors.As(err, &r) && r != nil && r.Cause == nil {
		r.Cause = ErrGuestRefused
	}
	return err
}

// UnknownError is an unknown outcome reported by the guest (or inferred by the host).
type UnknownError struct {
	Op      protocol.Op
	Code    string
	Message string
	Data    json.RawMessage
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("guestclient: %s outcome unknown: %s: %s", e.Op, e.Code, e.Message)
}

// Is makes errors.Is(err, ErrUnknownOutcome) true.
func (e *UnknownError) Is(target error) bool { return target == ErrUnknownOutcome }

// Client is one handshaken channel to a guest agent.
type Client struct {
	mu      sync.Mutex
	conn    net.Conn
	binding protocol.Binding
	ack     protocol.HandshakeAck
	seq     uint64
	broken  error
}

// Connect dials ep and performs the handshake.
func Connect(ctx context.Context, ep Endpoint, b protocol.Binding) (*Client, error) {
	c, err := Dial(ctx, ep)
	if err != nil {
		return nil, err
	}
	cl, err := Handshake(ctx, c, b)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return cl, nil
}

// WaitReady connects and handshakes, retrying every interval until ctx ends. A retry is
// what the transport demands: the guest's listener exists only once the guest has booted,
// and hybrid vsock has no readiness signal other than a CONNECT that is answered. A
// handshake refusal (the guest answered with another binding) is final and not retried.
// It returns the number of attempts made.
func WaitReady(ctx context.Context, ep Endpoint, b protocol.Binding, interval time.Duration) (*Client, int, error) {
	if interval <= 0 {
		interval = 50 * time.Millisecond
	}
	for attempt := 1; ; attempt++ {
		attemptCtx, cancel := context.WithTimeout(ctx, DefaultConnectTimeout)
		cl, err := Connect(attemptCtx, ep, b)
		cancel()
		if err == nil {
			return cl, attempt, nil
		}
		if GuestCode(err) != "" || errors.Is(err, ErrEndpointReplaced) || errors.Is(err, ErrProtocol) {
			return nil, attempt, err
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, attempt, fmt.Errorf("guestclient: guest not ready after %d attempts: %w (last: %w)", attempt, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Handshake sends the binding on conn and validates the guest's answer. On success the
// Client owns conn.
func Handshake(ctx context.Context, conn net.Conn, b protocol.Binding) (*Client, error) {
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("guestclient: own binding: %w", marked(err))
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultConnectTimeout)
	}
	ms := time.Until(deadline).Milliseconds()
	if ms <= 0 {
		return nil, fmt.Errorf("guestclient: handshake: %w", context.DeadlineExceeded)
	}
	ms = min(ms, protocol.MaxHandshakeDeadlineMS)
	p, err := json.Marshal(protocol.Handshake{Protocol: protocol.Version, Binding: b})
	if err != nil {
		return nil, fmt.Errorf("guestclient: marshal handshake: %w", err)
	}
	_ = conn.SetDeadline(deadline)
	if err := protocol.WriteFrame(conn, &protocol.Frame{Header: protocol.Header{Type: protocol.FrameHandshake, DeadlineMS: uint32(ms)}, Payload: p}); err != nil {
		return nil, fmt.Errorf("guestclient: handshake: %w", marked(err))
	}
	f, err := protocol.ReadFrame(conn)
	if err != nil {
		return nil, fmt.Errorf("guestclient: handshake answer: %w", marked(err))
	}
	_ = conn.SetDeadline(time.Time{})
	if f.Seq != 0 {
		return nil, fmt.Errorf("%w: handshake answered with sequence %d", ErrProtocol, f.Seq)
	}
	switch f.Type {
	case protocol.FrameError:
		return nil, decodeErrorFrame(f)
	case protocol.FrameResult:
	default:
		return nil, fmt.Errorf("%w: handshake answered with a %s frame", ErrProtocol, f.Type)
	}
	var res protocol.Result
	if err := protocol.DecodeJSON(f.Payload, &res); err != nil {
		return nil, fmt.Errorf("%w: handshake result: %w", ErrProtocol, marked(err))
	}
	if res.Outcome != protocol.OutcomeSucceeded || f.Count != 0 || res.Bulk != nil {
		return nil, fmt.Errorf("%w: handshake result outcome %q", ErrProtocol, res.Outcome)
	}
	var ack protocol.HandshakeAck
	if err := protocol.DecodeJSON(res.Data, &ack); err != nil {
		return nil, fmt.Errorf("%w: handshake ack: %w", ErrProtocol, marked(err))
	}
	if err := ack.Validate(); err != nil {
		return nil, fmt.Errorf("%w: handshake ack: %w", ErrProtocol, marked(err))
	}
	return &Client{conn: conn, binding: b, ack: ack}, nil
}

func decodeErrorFrame(f protocol.Frame) error {
	var ep protocol.ErrorPayload
	if err := protocol.DecodeJSON(f.Payload, &ep); err != nil || ep.Code == "" || len(ep.Code) > 64 {
		return fmt.Errorf("%w: undecodable error frame", ErrProtocol)
	}
	return fromWire(ep.Code, ep.Message)
}

// Ack is the guest's handshake answer (untrusted, validated for form).
func (c *Client) Ack() protocol.HandshakeAck { return c.ack }

// Binding is the binding this channel was opened with.
func (c *Client) Binding() protocol.Binding { return c.binding }

// Close closes the channel.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken == nil {
		c.broken = ErrBroken
	}
	return c.conn.Close()
}

func (c *Client) breakWith(err error) error {
	if c.broken == nil {
		c.broken = err
	}
	_ = c.conn.Close()
	return err
}

// call is one request: it returns the validated result envelope and the bulk bytes (at
// most bulkLimit), or an error: an *actuation.Refusal whose Cause is ErrGuestRefused for a
// refused outcome or an error frame,
// *UnknownError for an unknown outcome, ErrProtocol for a guest violation.
type call struct {
	op        protocol.Op
	opID      string
	args      any
	upload    []byte // content chunks (patch.stage)
	bulkLimit uint64 // 0: no bulk accepted
	// sink, when set, receives the bulk as it arrives (chunk by chunk) instead of a
	// buffer; do then returns no bulk bytes. A sink that refuses a write ends the
	// transfer there and closes the channel.
	sink io.Writer
	// deadline and ms, when ms is set, were computed by the caller (who checked the
	// arguments against them) and are sent as they are.
	deadline time.Time
	ms       uint32
}

func requestDeadline(ctx context.Context) (time.Time, uint32, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultDeadline)
	}
	ms := time.Until(deadline).Milliseconds()
	if ms <= 0 {
		return time.Time{}, 0, context.DeadlineExceeded
	}
	if ms > protocol.MaxDeadlineMS {
		ms = protocol.MaxDeadlineMS
		deadline = time.Now().Add(time.Duration(ms) * time.Millisecond)
	}
	return deadline, uint32(ms), nil
}

func (c *Client) do(ctx context.Context, k call) (protocol.Result, []byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return protocol.Result{}, nil, fmt.Errorf("%s: %w", k.op, c.broken)
	}
	deadline, ms := k.deadline, k.ms
	if ms == 0 {
		var err error
		if deadline, ms, err = requestDeadline(ctx); err != nil {
			return protocol.Result{}, nil, fmt.Errorf("%s: %w", k.op, err)
		}
	}
	c.seq++
	seq := c.seq
	if k.opID == "" {
		k.opID = "op-" + strconv.FormatUint(seq, 10)
	}
	args, err := json.Marshal(k.args)
	if err != nil {
		return protocol.Result{}, nil, fmt.Errorf("%s: marshal args: %w", k.op, err)
	}
	p, err := json.Marshal(protocol.Request{Op: k.op, OpID: k.opID, Channel: c.ack.Channel, Args: args})
	if err != nil {
		return protocol.Result{}, nil, fmt.Errorf("%s: marshal request: %w", k.op, err)
	}
	count := uint32(0)
	if k.upload != nil {
		if uint64(len(k.upload)) > protocol.MaxTransfer {
			return protocol.Result{}, nil, refusef(actuation.CodeTransferTooLarge, "upload of %d bytes exceeds %d", len(k.upload), protocol.MaxTransfer)
		}
		count = protocol.ChunkCount(uint64(len(k.upload)))
	}
	// The write must finish within the deadline. A failed write delivered an incomplete
	// frame, which the guest refuses before dispatch; the channel is closed either way.
	_ = c.conn.SetWriteDeadline(deadline)
	req := protocol.Frame{Header: protocol.Header{Type: protocol.FrameRequest, Seq: seq, DeadlineMS: ms, Count: count}, Payload: p}
	if err := protocol.WriteFrame(c.conn, &req); err != nil {
		return protocol.Result{}, nil, c.breakWith(fmt.Errorf("%s: request not delivered: %w", k.op, marked(err)))
	}
	if count > 0 {
		if err := protocol.WriteTransfer(c.conn, seq, k.upload); err != nil {
			// Nothing is published by a partial upload.
			return protocol.Result{}, nil, c.breakWith(fmt.Errorf("%s: upload: %w", k.op, marked(err)))
		}
	}
	_ = c.conn.SetReadDeadline(deadline.Add(ReportGrace))
	f, err := protocol.ReadFrame(c.conn)
	if err != nil {
		if actuation.CodeOf(err) != "" {
			return protocol.Result{}, nil, c.breakWith(fmt.Errorf("%w: %s result: %w", ErrProtocol, k.op, marked(err)))
		}
		return protocol.Result{}, nil, c.breakWith(&UnknownError{Op: k.op, Code: string(actuation.CodeDeadlineExceeded), Message: "no result: " + err.Error()})
	}
	if f.Seq != seq {
		return protocol.Result{}, nil, c.breakWith(fmt.Errorf("%w: %s answered with sequence %d, want %d", ErrProtocol, k.op, f.Seq, seq))
	}
	if f.Type == protocol.FrameError {
		// The guest refused at the frame level and closed the channel.
		return protocol.Result{}, nil, c.breakWith(decodeErrorFrame(f))
	}
	if f.Type != protocol.FrameResult {
		return protocol.Result{}, nil, c.breakWith(fmt.Errorf("%w: %s answered with a %s frame", ErrProtocol, k.op, f.Type))
	}
	var res protocol.Result
	if err := protocol.DecodeJSON(f.Payload, &res); err != nil {
		return protocol.Result{}, nil, c.breakWith(fmt.Errorf("%w: %s result: %w", ErrProtocol, k.op, marked(err)))
	}
	if !res.Outcome.Valid() || res.Op != k.op || res.OpID != k.opID ||
		(res.Outcome == protocol.OutcomeSucceeded) != (res.Code == "") || len(res.Code) > 64 {
		return protocol.Result{}, nil, c.breakWith(fmt.Errorf("%w: %s result envelope (outcome %q, op %q, opID %q, code %q)", ErrProtocol, k.op, res.Outcome, res.Op, res.OpID, res.Code))
	}
	var bulk []byte
	if res.Bulk != nil || f.Count != 0 {
		if res.Bulk == nil || k.bulkLimit == 0 {
			return protocol.Result{}, nil, c.breakWith(fmt.Errorf("%w: %s: unexpected bulk", ErrProtocol, k.op))
		}
		buf := &protocol.LimitedBuffer{Max: int(min(k.bulkLimit, protocol.MaxTransfer))}
		var sink io.Writer = buf
		if k.sink != nil {
			sink = k.sink
		}
		next := func() (protocol.Frame, error) { return protocol.ReadFrame(c.conn) }
		if err := protocol.ReadTransfer(next, seq, *res.Bulk, f.Count, k.bulkLimit, sink); err != nil {
			return protocol.Result{}, nil, c.breakWith(fmt.Errorf("%w: %s bulk: %w", ErrProtocol, k.op, marked(err)))
		}
		bulk = buf.Bytes()
		if bulk == nil && k.sink == nil {
			bulk = []byte{}
		}
	} else if k.bulkLimit != 0 && res.Outcome == protocol.OutcomeSucceeded {
		return protocol.Result{}, nil, c.breakWith(fmt.Errorf("%w: %s succeeded without its bulk", ErrProtocol, k.op))
	}
	_ = c.conn.SetDeadline(time.Time{})
	switch res.Outcome {
	case protocol.OutcomeRefused:
		err := fromWire(res.Code, res.Message)
		if errors.Is(err, ErrProtocol) {
			err = c.breakWith(fmt.Errorf("%s result: %w", k.op, err))
		}
		return res, nil, err
	case protocol.OutcomeUnknown:
		return res, bulk, &UnknownError{Op: k.op, Code: res.Code, Message: protocol.Truncate(res.Message), Data: res.Data}
	}
	return res, bulk, nil
}

// data decodes a succeeded result's data strictly; a failure is a protocol violation.
func (c *Client) data(res protocol.Result, v any) error {
	if err := protocol.DecodeJSON(res.Data, v); err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.breakWith(fmt.Errorf("%w: %s data: %w", ErrProtocol, res.Op, marked(err)))
	}
	return nil
}

func (c *Client) violation(op protocol.Op, format string, args ...any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.breakWith(fmt.Errorf("%w: %s: %s", ErrProtocol, op, fmt.Sprintf(format, args...)))
}

// Package agent is the Workbench guest agent: it serves protocol v1 (guest/protocol/v1)
// on one stream listener (AF_VSOCK in a VM; a Unix socket only in the conformance build)
// and performs the guest-side mechanics: processes with one output budget, PTY sessions,
// file snapshot/read beneath a root, content-bound patch staging and apply, bounded
// export, inspect, quiesce and shutdown. It owns no policy: the host admits every request
// before sending it, and the guest only refuses what it cannot do within the wire and
// resource caps.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

// Version identifies this agent build in the handshake answer and inspect.
const Version = "workbench-guest/0.1.0"

// Defaults for Config fields left zero.
const (
	DefaultMaxConns       = 16
	DefaultMaxSessions    = 16
	DefaultMaxProcs       = 32
	DefaultIdleTimeout    = 15 * time.Minute
	DefaultHandshakeWait  = 10 * time.Second
	resultWriteTimeout    = 30 * time.Second
	maxBindingFileBytes   = 4096
	maxNetInterfaces      = 64
	ptyBufferBytes        = protocol.MaxPTYRead
	spawnIODrainAfterExit = 2 * time.Second
)

// Config configures an Agent.
type Config struct {
	// Root is the directory every path of the protocol is resolved beneath.
	Root string
	// StateDir holds the agent's state (patch stages); it should be outside Root.
	StateDir string
	// Binding loads the expected binding from the read-only boot input. It is called
	// until it succeeds once; the result is then fixed for the agent's life.
	Binding func() (protocol.Binding, error)
	// LocalCID, if set, returns the guest's own vsock CID; a binding naming another CID
	// is refused. Nil on the conformance Unix transport.
	LocalCID func() (uint32, error)
	// PID1 reports that the agent runs under the guest init (inspect only).
	PID1        bool
	MaxConns    int
	MaxSessions int
	MaxProcs    int
	IdleTimeout time.Duration
	// Logf receives short diagnostics (never payload bytes). Nil discards them.
	Logf func(format string, args ...any)
	// Cgroups, when set, runs every command and session in a cgroup of its own with the
	// guest's per-command limits (cgroup.go); nil in the minimal image (no cgroup v2).
	Cgroups *CommandCgroups
}

// ErrShutdown is returned by Serve after a shutdown request was answered.
var ErrShutdown = errors.New("guest agent: shutdown requested")

// Agent serves protocol v1.
type Agent struct {
	cfg     Config
	rootFd  int
	started time.Time
	bootID  string

	bindMu  sync.Mutex
	binding *protocol.Binding
	// bindEpoch advances at every rebind; a channel handshaken under an older epoch is
	// superseded (rebind.go).
	bindEpoch uint64
	rebindMu  sync.Mutex // one rebind at a time

	conns    chan struct{} // connection semaphore
	nconns   atomic.Int32
	quiesced atomic.Bool
	stopping atomic.Bool
	shutdown chan struct{}
	shutOnce sync.Once

	stages *stageStore

	mu       sync.Mutex
	sessions map[string]*session
	procs    map[string]*proc
}

// New opens the root and the stage store.
func New(cfg Config) (*Agent, error) {
	if cfg.Binding == nil {
		return nil, errors.New("guest agent: no binding source")
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.MaxProcs <= 0 {
		cfg.MaxProcs = DefaultMaxProcs
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	fd, err := unix.Open(cfg.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("guest agent: open root %q: %w", cfg.Root, err)
	}
	st, err := openStageStore(cfg.StateDir)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Agent{
		cfg:      cfg,
		rootFd:   fd,
		started:  time.Now(),
		bootID:   randomHex(16),
		conns:    make(chan struct{}, cfg.MaxConns),
		shutdown: make(chan struct{}),
		stages:   st,
		sessions: map[string]*session{},
		procs:    map[string]*proc{},
	}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on Linux >= 3.17
	}
	return hex.EncodeToString(b)
}

// LoadBindingFile reads a binding JSON document of at most 4 KiB (the fw_cfg raw file or
// the conformance suite's file) and validates it.
func LoadBindingFile(path string) (protocol.Binding, error) {
	f, err := os.Open(path)
	if err != nil {
		return protocol.Binding{}, fmt.Errorf("binding: %w", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxBindingFileBytes+1))
	if err != nil {
		return protocol.Binding{}, fmt.Errorf("binding: read %s: %w", path, err)
	}
	if len(b) > maxBindingFileBytes {
		return protocol.Binding{}, actuation.Refusef(actuation.CodeBindingInvalid, "binding larger than %d bytes", maxBindingFileBytes)
	}
	var bind protocol.Binding
	if err := protocol.DecodeJSON(b, &bind); err != nil {
		return protocol.Binding{}, fmt.Errorf("binding: %w", err)
	}
	if err := bind.Validate(); err != nil {
		return protocol.Binding{}, fmt.Errorf("binding: %w", err)
	}
	return bind, nil
}

func (a *Agent) expected() (protocol.Binding, uint64, error) {
	a.bindMu.Lock()
	defer a.bindMu.Unlock()
	if a.binding != nil {
		return *a.binding, a.bindEpoch, nil
	}
	b, err := a.loadBinding()
	if err != nil {
		return protocol.Binding{}, 0, err
	}
	if err := b.Validate(); err != nil {
		return protocol.Binding{}, 0, err
	}
	if a.cfg.LocalCID != nil {
		cid, err := a.cfg.LocalCID()
		if err != nil {
			return protocol.Binding{}, 0, fmt.Errorf("local CID: %w", err)
		}
		if cid != b.GuestCID {
			return protocol.Binding{}, 0, actuation.Refusef(actuation.CodeCIDMismatch, "boot binding names CID %d, this guest is CID %d", b.GuestCID, cid)
		}
	}
	a.binding = &b
	return b, a.bindEpoch, nil
}

// Close releases the root and kills what is still running.
func (a *Agent) Close() error {
	a.killAll()
	return unix.Close(a.rootFd)
}

// Serve accepts connections until the listener fails or a shutdown was answered.
func (a *Agent) Serve(l net.Listener) error {
	go func() {
		<-a.shutdown
		_ = l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			select {
			case <-a.shutdown:
				return ErrShutdown
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("guest agent: accept: %w", err)
		}
		select {
		case a.conns <- struct{}{}:
			go func() {
				defer func() { <-a.conns }()
				a.nconns.Add(1)
				defer a.nconns.Add(-1)
				a.serveConn(c)
			}()
		default:
			go func() {
				defer func() { _ = c.Close() }()
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				writeError(c, 0, actuation.Refusef(actuation.CodeConnectionCap, "at most %d connections", a.cfg.MaxConns))
			}()
		}
	}
}

// frameError is a violation that closes the connection after an error frame.
type frameError struct{ err error }

func (e *frameError) Error() string { return e.err.Error() }
func (e *frameError) Unwrap() error { return e.err }

func closeWith(err error) error { return &frameError{err: err} }

// wireRefusal is the protocol edge of a refusal: the wire code and message of err (the
// code of the *actuation.Refusal in its chain, or io-error for an uncoded failure; the
// message is err's text without the leading code the wire carries beside it). Frames carry
// only these two fields; no Go error type crosses the wire.
func wireRefusal(err error) (code, message string) {
	c := actuation.CodeOf(err)
	if c == "" {
		c = actuation.CodeIOError
	}
	return string(c), strings.TrimPrefix(err.Error(), string(c)+": ")
}

func writeError(w io.Writer, seq uint64, err error) {
	code, msg := wireRefusal(err)
	p, _ := json.Marshal(protocol.ErrorPayload{Code: code, Message: protocol.Truncate(msg)})
	_ = protocol.WriteFrame(w, &protocol.Frame{Header: protocol.Header{Type: protocol.FrameError, Seq: seq}, Payload: p})
}

// reply is what an operation returns.
type reply struct {
	outcome protocol.Outcome
	code    string
	message string
	data    any
	bulk    []byte
	after   func() // runs after the result was written (shutdown)
}

func ok(data any, bulk []byte) reply {
	return reply{outcome: protocol.OutcomeSucceeded, data: data, bulk: bulk}
}

func refused(err error) reply {
	code, msg := wireRefusal(err)
	return reply{outcome: protocol.OutcomeRefused, code: code, message: msg}
}

func unknown(code string, err error, data any) reply {
	return reply{outcome: protocol.OutcomeUnknown, code: code, message: err.Error(), data: data}
}

type conn struct {
	a       *Agent
	c       net.Conn
	channel string
	lastSeq uint64
	epoch   uint64 // the binding epoch this channel handshook under
}

func (a *Agent) serveConn(c net.Conn) {
	defer func() { _ = c.Close() }()
	if a.stopping.Load() {
		writeError(c, 0, actuation.Refusef(actuation.CodeShuttingDown, "agent is shutting down"))
		return
	}
	cn := &conn{a: a, c: c}
	if err := cn.handshake(); err != nil {
		a.cfg.Logf("handshake refused: %s", actuation.CodeOf(err))
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		writeError(c, 0, err)
		return
	}
	for {
		_ = c.SetReadDeadline(time.Now().Add(a.cfg.IdleTimeout))
		f, err := protocol.ReadFrame(c)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || actuation.CodeOf(err) == "" {
				return
			}
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			writeError(c, 0, err)
			return
		}
		after, err := cn.request(f)
		if err != nil {
			var fe *frameError
			if errors.As(err, &fe) {
				a.cfg.Logf("seq %d refused, closing: %s", f.Seq, actuation.CodeOf(err))
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				writeError(c, f.Seq, err)
			}
			return
		}
		if after != nil {
			after()
			return
		}
	}
}

func (cn *conn) handshake() error {
	_ = cn.c.SetReadDeadline(time.Now().Add(DefaultHandshakeWait))
	f, err := protocol.ReadFrame(cn.c)
	if err != nil {
		if actuation.CodeOf(err) != "" {
			return err
		}
		return actuation.Refusef(actuation.CodeHandshakeRequired, "no handshake: %v", err)
	}
	if f.Type != protocol.FrameHandshake {
		return actuation.Refusef(actuation.CodeHandshakeRequired, "first frame is %s", f.Type)
	}
	deadline := time.Now().Add(time.Duration(f.DeadlineMS) * time.Millisecond)
	var h protocol.Handshake
	if err := protocol.DecodeJSON(f.Payload, &h); err != nil {
		return err
	}
	want, epoch, err := cn.a.expected()
	if err != nil {
		if actuation.CodeOf(err) == "" {
			return actuation.Refusef(actuation.CodeBindingUnavailable, "%v", err)
		}
		return err
	}
	if err := want.Check(&h); err != nil {
		return err
	}
	cn.channel = randomHex(16)
	cn.epoch = epoch
	ack := protocol.HandshakeAck{Protocol: protocol.Version, Channel: cn.channel, BootID: cn.a.bootID, AgentVersion: Version, Limits: protocol.WireLimits()}
	_ = cn.c.SetWriteDeadline(deadline)
	return cn.writeResult(0, "", "", reply{outcome: protocol.OutcomeSucceeded, data: ack})
}

func (cn *conn) writeResult(seq uint64, op protocol.Op, opID string, r reply) error {
	res := protocol.Result{Op: op, OpID: opID, Outcome: r.outcome, Code: r.code, Message: protocol.Truncate(r.message)}
	if r.data != nil {
		d, err := json.Marshal(r.data)
		if err != nil {
			return fmt.Errorf("marshal result data: %w", err)
		}
		res.Data = d
	}
	if r.bulk != nil || r.outcome == protocol.OutcomeSucceeded && isBulkOp(op) {
		res.Bulk = &protocol.Bulk{Bytes: uint64(len(r.bulk)), Digest: protocol.DigestOf(r.bulk)}
	}
	p, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("marshal result: %w", err)
	}
	count := uint32(0)
	if res.Bulk != nil {
		count = protocol.ChunkCount(res.Bulk.Bytes)
	}
	if err := protocol.WriteFrame(cn.c, &protocol.Frame{Header: protocol.Header{Type: protocol.FrameResult, Seq: seq, Count: count}, Payload: p}); err != nil {
		return err
	}
	if count > 0 {
		return protocol.WriteTransfer(cn.c, seq, r.bulk)
	}
	return nil
}

func isBulkOp(op protocol.Op) bool {
	switch op {
	case protocol.OpSpawn, protocol.OpPTYRead, protocol.OpFileSnapshot, protocol.OpFileRead, protocol.OpExport:
		return true
	}
	return false
}

// request validates one request frame completely before dispatching it. Framing and
// request-form violations return a frameError (error frame, connection closed).
func (cn *conn) request(f protocol.Frame) (func(), error) {
	arrival := time.Now()
	if f.Type != protocol.FrameRequest {
		return nil, closeWith(actuation.Refusef(actuation.CodeUnexpectedFrame, "expected a request, got %s", f.Type))
	}
	if f.Seq <= cn.lastSeq {
		return nil, closeWith(actuation.Refusef(actuation.CodeSequenceReplayed, "sequence %d after %d", f.Seq, cn.lastSeq))
	}
	cn.lastSeq = f.Seq
	deadline := arrival.Add(time.Duration(f.DeadlineMS) * time.Millisecond)
	var req protocol.Request
	if err := protocol.DecodeJSON(f.Payload, &req); err != nil {
		return nil, closeWith(err)
	}
	if !req.Op.Known() {
		return nil, closeWith(actuation.Refusef(actuation.CodeUnknownOperation, "operation %q", protocol.Truncate(string(req.Op))))
	}
	if !protocol.ValidID(req.OpID) {
		return nil, closeWith(actuation.Refusef(actuation.CodeMalformedPayload, "opID must be 1..%d of [A-Za-z0-9._-]", protocol.MaxIDLen))
	}
	if req.Channel != cn.channel {
		return nil, closeWith(actuation.Refusef(actuation.CodeChannelMismatch, "request bound to another channel"))
	}
	if cn.a.superseded(cn) {
		return nil, closeWith(actuation.Refusef(actuation.CodeNonceMismatch, "the guest was re-bound: this channel's nonce is no longer its binding"))
	}
	if f.Count != 0 && req.Op != protocol.OpPatchStage {
		return nil, closeWith(actuation.Refusef(actuation.CodeTransferMismatch, "%s takes no upload", req.Op))
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	r, err := cn.a.dispatch(ctx, cn, f, &req)
	if err != nil {
		return nil, err
	}
	// The result is written even after the deadline (the effect is done and its report is
	// due), bounded by a write timeout of its own.
	_ = cn.c.SetWriteDeadline(time.Now().Add(resultWriteTimeout))
	if err := cn.writeResult(f.Seq, req.Op, req.OpID, r); err != nil {
		return nil, err
	}
	return r.after, nil
}

// decodeArgs decodes the request's args strictly; a failure closes the connection.
func decodeArgs(req *protocol.Request, v any) error {
	if len(req.Args) == 0 {
		return closeWith(actuation.Refusef(actuation.CodeMalformedPayload, "%s without args", req.Op))
	}
	if err := protocol.DecodeJSON(req.Args, v); err != nil {
		return closeWith(err)
	}
	return nil
}

type validator interface{ Validate() error }

func (a *Agent) dispatch(ctx context.Context, cn *conn, f protocol.Frame, req *protocol.Request) (reply, error) {
	deadline, _ := ctx.Deadline()
	if req.Op == protocol.OpPatchStage {
		return a.patchStage(ctx, cn, f, req)
	}
	simple := func(args validator, run func() reply) (reply, error) {
		if err := decodeArgs(req, args); err != nil {
			return reply{}, err
		}
		if err := args.Validate(); err != nil {
			return refused(err), nil
		}
		if a.stopping.Load() {
			return refused(actuation.Refusef(actuation.CodeShuttingDown, "agent is shutting down")), nil
		}
		return run(), nil
	}
	switch req.Op {
	case protocol.OpSpawn:
		var args protocol.SpawnArgs
		if err := decodeArgs(req, &args); err != nil {
			return reply{}, err
		}
		if err := args.Validate(f.DeadlineMS); err != nil {
			return refused(err), nil
		}
		return a.spawn(ctx, req.OpID, &args), nil
	case protocol.OpPTYOpen:
		var args protocol.PTYOpenArgs
		return simple(&args, func() reply { return a.ptyOpen(&args) })
	case protocol.OpPTYRead:
		var args protocol.PTYReadArgs
		return simple(&args, func() reply { return a.ptyRead(ctx, &args) })
	case protocol.OpPTYInput:
		var args protocol.PTYInputArgs
		return simple(&args, func() reply { return a.ptyInput(deadline, &args) })
	case protocol.OpPTYResize:
		var args protocol.PTYResizeArgs
		return simple(&args, func() reply { return a.ptyResize(&args) })
	case protocol.OpPTYClose:
		var args protocol.SessionArgs
		return simple(&args, func() reply { return a.ptyClose(ctx, &args) })
	case protocol.OpSignal:
		var args protocol.SignalArgs
		return simple(&args, func() reply { return a.signal(&args) })
	case protocol.OpFileSnapshot:
		var args protocol.SnapshotArgs
		return simple(&args, func() reply { return a.snapshot(ctx, &args) })
	case protocol.OpFileRead:
		var args protocol.ReadArgs
		return simple(&args, func() reply { return a.readFile(&args) })
	case protocol.OpPatchApply:
		var args protocol.ApplyArgs
		return simple(&args, func() reply { return a.patchApply(&args) })
	case protocol.OpExport:
		var args protocol.ExportArgs
		return simple(&args, func() reply { return a.export(ctx, &args) })
	case protocol.OpInspect:
		var args emptyArgs
		return simple(&args, func() reply { return a.inspect() })
	case protocol.OpQuiesce:
		var args emptyArgs
		return simple(&args, func() reply { return a.quiesce() })
	case protocol.OpShutdown:
		var args emptyArgs
		return simple(&args, func() reply { return a.shutdownOp() })
	case protocol.OpRebind:
		var args protocol.RebindArgs
		return simple(&args, func() reply { return a.rebind(ctx, cn, &args) })
	}
	return reply{}, closeWith(actuation.Refusef(actuation.CodeUnknownOperation, "operation %q", req.Op))
}

type emptyArgs struct{}

func (*emptyArgs) Validate() error { return nil }

func (a *Agent) quiesce() reply {
	a.quiesced.Store(true)
	unix.Sync()
	s, p := a.counts()
	return ok(protocol.QuiesceData{Sessions: s, Processes: p}, nil)
}

func (a *Agent) shutdownOp() reply {
	a.stopping.Store(true)
	a.quiesced.Store(true)
	r := ok(protocol.Empty{}, nil)
	r.after = func() {
		a.killAll()
		unix.Sync()
		a.shutOnce.Do(func() { close(a.shutdown) })
	}
	return r
}

func (a *Agent) counts() (sessions, procs uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return uint32(len(a.sessions)), uint32(len(a.procs))
}

func (a *Agent) inspect() reply {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	n, b := a.stages.usage()
	s, p := a.counts()
	d := protocol.InspectData{
		BootID:        a.bootID,
		AgentVersion:  Version,
		Kernel:        unix.ByteSliceToString(uts.Release[:]),
		UptimeMS:      uint64(time.Since(a.started).Milliseconds()),
		PID1:          a.cfg.PID1,
		Quiesced:      a.quiesced.Load(),
		Stages:        n,
		StageBytes:    b,
		Sessions:      s,
		Processes:     p,
		Connections:   uint32(a.nconns.Load()),
		NetInterfaces: netInterfaces(),
	}
	return ok(d, nil)
}

func netInterfaces() []string {
	f, err := os.Open("/sys/class/net")
	if err != nil {
		return []string{}
	}
	defer func() { _ = f.Close() }()
	names, _ := f.Readdirnames(maxNetInterfaces)
	if names == nil {
		names = []string{}
	}
	return names
}

package guestclient

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
)

// guestBin is the real guest agent, built once with the conformance-only Unix transport.
var guestBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "workbench-guest-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..")
	guestBin = filepath.Join(dir, "workbench-guest")
	args := []string{"build", "-tags", "workbench_unix_transport", "-o", guestBin}
	cgo := "CGO_ENABLED=0"
	if os.Getenv("WORKBENCH_GUEST_RACE") == "1" {
		// The agent under the race detector; its reports appear in the test log.
		args, cgo = append(args, "-race"), "CGO_ENABLED=1"
	}
	cmd := exec.Command("go", append(args, "./guest/cmd/workbench-guest")...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), cgo)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the guest agent: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

type guest struct {
	ep      Endpoint
	binding protocol.Binding
	root    string
	state   string
	cmd     *exec.Cmd
	exited  chan error

	bindingFile string
}

func newNonce() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func testBinding() protocol.Binding {
	return protocol.Binding{
		EnvironmentRef:   "default/conformance",
		SourceGeneration: 7,
		PlanDigest:       protocol.DigestOf([]byte("plan")),
		ImageDigest:      protocol.DigestOf([]byte("image")),
		GuestCID:         3,
		BootNonce:        newNonce(),
	}
}

// startGuest runs the real guest binary on a Unix socket with a fresh binding file (the
// conformance stand-in for fw_cfg).
func startGuest(t *testing.T) *guest {
	t.Helper()
	dir := t.TempDir()
	g := &guest{binding: testBinding(), root: filepath.Join(dir, "root"), state: filepath.Join(dir, "state")}
	for _, d := range []string{g.root, g.state} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bf := filepath.Join(dir, "binding.json")
	b, _ := json.Marshal(g.binding)
	if err := os.WriteFile(bf, b, 0o400); err != nil {
		t.Fatal(err)
	}
	g.bindingFile = bf
	g.ep = Endpoint{Path: filepath.Join(dir, "agent.sock")}
	g.launch(t)
	return g
}

// launch starts the agent process on g's socket, binding file, root and state dir.
func (g *guest) launch(t *testing.T) {
	t.Helper()
	sock := g.ep.Path
	_ = os.Remove(sock)
	g.cmd = exec.Command(guestBin, "--unix-socket", sock, "--binding-file", g.bindingFile, "--root", g.root, "--state-dir", g.state)
	g.cmd.Stderr = &testLog{t: t}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	g.exited = exited
	cmd := g.cmd
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited //nolint:errcheck // killed: the exit status is "signal: killed"
	})
	// Test-only readiness poll: connecting succeeds once the agent listens.
	for end := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(end) {
			t.Fatal("guest agent did not listen within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// restart kills the agent and starts it again on the same state (as the guest init does
// after an agent crash).
func (g *guest) restart(t *testing.T) {
	t.Helper()
	_ = g.cmd.Process.Kill()
	<-g.exited      //nolint:errcheck // killed
	g.exited <- nil // for the first launch's cleanup
	g.launch(t)
}

type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Logf("guest: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (g *guest) client(t *testing.T) *Client {
	t.Helper()
	c, err := Connect(ctxT(t, 10*time.Second), g.ep, g.binding)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// raw is a hand-driven connection for the refusal cases the Client never produces.
type raw struct {
	t       *testing.T
	c       net.Conn
	channel string
}

func (g *guest) raw(t *testing.T, handshake bool) *raw {
	t.Helper()
	c, err := net.Dial("unix", g.ep.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	r := &raw{t: t, c: c}
	if handshake {
		p, _ := json.Marshal(protocol.Handshake{Protocol: protocol.Version, Binding: g.binding})
		r.write(protocol.Frame{Header: protocol.Header{Type: protocol.FrameHandshake, DeadlineMS: 5000}, Payload: p})
		f := r.read()
		var res protocol.Result
		var ack protocol.HandshakeAck
		if f.Type != protocol.FrameResult || protocol.DecodeJSON(f.Payload, &res) != nil || protocol.DecodeJSON(res.Data, &ack) != nil {
			t.Fatalf("raw handshake failed: %s %s", f.Type, f.Payload)
		}
		r.channel = ack.Channel
	}
	return r
}

func (r *raw) write(f protocol.Frame) {
	r.t.Helper()
	if err := protocol.WriteFrame(r.c, &f); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

func (r *raw) read() protocol.Frame {
	r.t.Helper()
	f, err := protocol.ReadFrame(r.c)
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return f
}

func (r *raw) request(seq uint64, deadlineMS, count uint32, op protocol.Op, args any) {
	r.t.Helper()
	a, _ := json.Marshal(args)
	p, _ := json.Marshal(protocol.Request{Op: op, OpID: fmt.Sprintf("raw-%d", seq), Channel: r.channel, Args: a})
	r.write(protocol.Frame{Header: protocol.Header{Type: protocol.FrameRequest, Seq: seq, DeadlineMS: deadlineMS, Count: count}, Payload: p})
}

func (r *raw) result() protocol.Result {
	r.t.Helper()
	f := r.read()
	if f.Type != protocol.FrameResult {
		r.t.Fatalf("want a result, got %s: %s", f.Type, f.Payload)
	}
	var res protocol.Result
	if err := protocol.DecodeJSON(f.Payload, &res); err != nil {
		r.t.Fatal(err)
	}
	for i := uint32(0); i < f.Count; i++ {
		r.read()
	}
	return res
}

// expectError reads an error frame with code, then end of stream (the guest closed).
func (r *raw) expectError(code string) {
	r.t.Helper()
	f, err := protocol.ReadFrame(r.c)
	if err != nil {
		r.t.Fatalf("want error frame %q, got %v", code, err)
	}
	if f.Type != protocol.FrameError {
		r.t.Fatalf("want error frame %q, got %s: %s", code, f.Type, f.Payload)
	}
	var ep protocol.ErrorPayload
	if err := protocol.DecodeJSON(f.Payload, &ep); err != nil {
		r.t.Fatal(err)
	}
	if ep.Code != code {
		r.t.Fatalf("want error code %q, got %q (%s)", code, ep.Code, ep.Message)
	}
	_ = r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if n, err := r.c.Read(b[:]); n != 0 || err == nil {
		r.t.Fatalf("connection not closed after error frame (read %d, %v)", n, err)
	}
}

func wantRefusal(t *testing.T, err error, code string) {
	t.Helper()
	if got := string(GuestCode(err)); got != code {
		t.Fatalf("want refusal %q, got %v", code, err)
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func sha(b []byte) [32]byte { return sha256.Sum256(b) }

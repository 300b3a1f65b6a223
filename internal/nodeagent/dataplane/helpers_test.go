package dataplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// fakeResolver stands in for the node agent: sessions from a real
// session.Manager, roots opened with fsaccess.
type fakeResolver struct {
	mgr *session.Manager

	mu       sync.Mutex
	sessions map[string]fakeSession
	roots    map[string]Files
}

type fakeSession struct {
	s    *session.Session
	info SessionInfo
}

func (f *fakeResolver) Session(ns, name string) (Terminal, SessionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.sessions[ns+"/"+name]
	if !ok {
		return nil, SessionInfo{}, fmt.Errorf("terminal session %s/%s is not on this node: %w", ns, name, ErrNotFound)
	}
	return fs.s, fs.info, nil
}

func (f *fakeResolver) Root(ns, env, root string) (Files, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.roots[ns+"/"+env+"/"+root]
	if !ok {
		return nil, fmt.Errorf("root %q of environment %s/%s: %w", root, ns, env, ErrNotFound)
	}
	return r, nil
}

type testServer struct {
	srv    *Server
	base   string
	client *http.Client
	res    *fakeResolver
}

// startServer serves a data plane on a loopback port with a freshly generated
// certificate and returns a client that trusts only its CA.
func startServer(tb testing.TB, authn Authenticator, authz Authorizer, lim Limits, opts ...func(*Server)) *testServer {
	tb.Helper()
	cert, caPEM, err := GenerateServingCert([]string{"127.0.0.1", "localhost"})
	if err != nil {
		tb.Fatal(err)
	}
	mgr := session.NewManager(session.Caps{Sessions: 16, SessionsPerEnvironment: 16, ReaderTasks: 64})
	res := &fakeResolver{mgr: mgr, sessions: map[string]fakeSession{}, roots: map[string]Files{}}
	srv, err := New(Config{
		TLS:           &tls.Config{Certificates: []tls.Certificate{cert}},
		Authenticator: authn, Authorizer: authz, Resolver: res, Limits: lim,
	})
	if err != nil {
		tb.Fatal(err)
	}
	for _, o := range opts {
		o(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeListener(ctx, ln) }()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		tb.Fatal("CA PEM not accepted")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 8}
	ts := &testServer{
		srv:    srv,
		base:   "https://" + ln.Addr().String(),
		client: &http.Client{Transport: tr, Timeout: time.Minute},
		res:    res,
	}
	tb.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("ServeListener: %v", err)
		}
		sctx, scancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer scancel()
		if err := mgr.Shutdown(sctx); err != nil {
			tb.Errorf("session manager shutdown: %v", err)
		}
	})
	return ts
}

// openSession runs /bin/cat on a PTY as TerminalSession ns/name.
func (ts *testServer) openSession(tb testing.TB, ns, name string, rawInput wbv1.RawInput, depth int) *session.Session {
	tb.Helper()
	s, err := ts.res.mgr.Open(context.Background(), session.Spec{
		ID: ns + "/" + name, EnvironmentID: ns + "/env", Argv: []string{"/bin/cat"},
		IdleTimeout: -1, EventBufferDepth: depth,
	})
	if err != nil {
		tb.Fatal(err)
	}
	ts.res.mu.Lock()
	ts.res.sessions[ns+"/"+name] = fakeSession{s: s, info: SessionInfo{RawInput: rawInput}}
	ts.res.mu.Unlock()
	return s
}

// addRoot registers dir as root of environment ns/env.
func (ts *testServer) addRoot(tb testing.TB, ns, env, root, dir string) {
	tb.Helper()
	r, err := fsaccess.OpenRoot(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = r.Close() })
	ts.res.mu.Lock()
	ts.res.roots[ns+"/"+env+"/"+root] = HostFiles(r)
	ts.res.mu.Unlock()
}

// addFiles registers any Files (e.g. a root inside a VM guest) as root of environment ns/env.
func (ts *testServer) addFiles(ns, env, root string, f Files) {
	ts.res.mu.Lock()
	ts.res.roots[ns+"/"+env+"/"+root] = f
	ts.res.mu.Unlock()
}

type rawBody string

// sessionPath and filesPath are the v2 paths of a session subresource and of an
// environment's files.
func sessionPath(ns, name, sub string) string {
	return protocol.V2Path(ns, "terminalsessions", name, sub)
}

func filesPath(ns, env string) string { return protocol.V2Path(ns, "environments", env, "files") }

// do sends one request; body is JSON-encoded unless it is a rawBody.
func (ts *testServer) do(tb testing.TB, method, path, token string, body any) (int, []byte) {
	tb.Helper()
	return ts.doCtx(tb, context.Background(), method, path, token, body)
}

func (ts *testServer) doCtx(tb testing.TB, ctx context.Context, method, path, token string, body any) (int, []byte) {
	tb.Helper()
	status, resp, err := ts.request(ctx, method, path, token, body)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	return status, resp
}

func (ts *testServer) request(ctx context.Context, method, path, token string, body any) (int, []byte, error) {
	resp, err := ts.send(ctx, method, path, token, body, nil)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, raw, err
}

// send sends one request with extra headers hdr and returns the response unread.
func (ts *testServer) send(ctx context.Context, method, path, token string, body any, hdr http.Header) (*http.Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case rawBody:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, ts.base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return ts.client.Do(req)
}

// errorCode is the stable code of a refusal's metav1.Status body.
func errorCode(tb testing.TB, body []byte) string {
	tb.Helper()
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil {
		tb.Fatalf("error body %q: %v", body, err)
	}
	if st.Message == "" || st.Kind != "Status" {
		tb.Errorf("error body %q is not a Status with a message", body)
	}
	return protocol.CodeOfStatus(&st)
}

// expect checks status (and code for errors) of one request.
func (ts *testServer) expect(tb testing.TB, method, path, token string, body any, status int, code string) []byte {
	tb.Helper()
	got, resp := ts.do(tb, method, path, token, body)
	if got != status {
		tb.Fatalf("%s %s: status %d, want %d; body %s", method, path, got, status, resp)
	}
	if code != "" {
		if c := errorCode(tb, resp); c != code {
			tb.Fatalf("%s %s: code %q, want %q; body %s", method, path, c, code, resp)
		}
	}
	return resp
}

// events reads the session's events after since (GET .../events, not followed).
func (ts *testServer) events(tb testing.TB, token, ns, name string, since uint64) []SessionEvent {
	tb.Helper()
	body := ts.expect(tb, "GET", fmt.Sprintf("%s?since=%d", sessionPath(ns, name, "events"), since), token, nil, 200, "")
	return decodeEvents(tb, bytes.NewReader(body), nil)
}

// decodeEvents decodes JSON Lines events until the stream ends or stop(events so far) holds.
func decodeEvents(tb testing.TB, r io.Reader, stop func([]SessionEvent) bool) []SessionEvent {
	tb.Helper()
	var evs []SessionEvent
	dec := json.NewDecoder(r)
	for stop == nil || !stop(evs) {
		var ev SessionEvent
		if err := dec.Decode(&ev); err != nil {
			if err == io.EOF {
				return evs
			}
			tb.Fatalf("decoding the event stream after %d events: %v", len(evs), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// follow opens GET .../events?follow=true after since; the stream is the response body.
func (ts *testServer) follow(tb testing.TB, ctx context.Context, token, ns, name string, since uint64) *http.Response {
	tb.Helper()
	resp, err := ts.send(ctx, "GET", fmt.Sprintf("%s?since=%d&follow=true", sessionPath(ns, name, "events"), since), token, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		tb.Fatalf("follow events of %s/%s: status %d: %s", ns, name, resp.StatusCode, raw)
	}
	return resp
}

// outputOf concatenates the output text of evs.
func outputOf(evs []SessionEvent) []byte {
	var out []byte
	for _, e := range evs {
		if e.Type == string(ring.KindOutput) {
			out = append(out, e.Text...)
			out = append(out, e.DataBase64...)
		}
	}
	return out
}

// readOutput follows the session's events after since until until(output) holds (or the
// stream ends: a failure), and returns the output and the last sequence number read.
func (ts *testServer) readOutput(tb testing.TB, token, ns, name string, since uint64, until func([]byte) bool) ([]byte, uint64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := ts.follow(tb, ctx, token, ns, name, since)
	evs := decodeEvents(tb, resp.Body, func(evs []SessionEvent) bool { return until(outputOf(evs)) })
	out := outputOf(evs)
	if !until(out) {
		tb.Fatalf("the event stream ended before the expected output; got %q", out)
	}
	return out, evs[len(evs)-1].Seq
}

// upgrade is the header of a WebSocket upgrade request: a refusal is answered before the
// handshake, as a plain response.
var upgrade = http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
	"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "Sec-Websocket-Protocol": {protocol.ProtocolV5}}

// expectAttachRefused asks for an attach (stdin or not) and expects the refusal status and code.
func (ts *testServer) expectAttachRefused(tb testing.TB, token, ns, name string, stdin bool, status int, code string) {
	tb.Helper()
	path := fmt.Sprintf("%s?stdin=%t", sessionPath(ns, name, "attach"), stdin)
	resp, err := ts.send(context.Background(), "GET", path, token, nil, upgrade)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != status {
		tb.Fatalf("attach %s stdin=%t: status %d, want %d; body %s", path, stdin, resp.StatusCode, status, raw)
	}
	if c := errorCode(tb, raw); c != code {
		tb.Fatalf("attach %s stdin=%t: code %q, want %q; body %s", path, stdin, c, code, raw)
	}
}

// attach opens an attach stream (remote command protocol v5) on session ns/name.
func (ts *testServer) attach(tb testing.TB, token, ns, name string, stdin bool) *websocket.Conn {
	tb.Helper()
	loc := "wss" + strings.TrimPrefix(ts.base, "https") + fmt.Sprintf("%s?stdin=%t", sessionPath(ns, name, "attach"), stdin)
	cfg, err := websocket.NewConfig(loc, ts.base)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.TlsConfig = ts.client.Transport.(*http.Transport).TLSClientConfig
	cfg.Protocol = []string{protocol.ProtocolV5}
	cfg.Header = http.Header{"Authorization": {"Bearer " + token}}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		tb.Fatalf("attach to %s/%s (stdin=%t): %v", ns, name, stdin, err)
	}
	ws.PayloadType = websocket.BinaryFrame
	tb.Cleanup(func() { _ = ws.Close() })
	return ws
}

// sendStdin writes data on the stdin channel of an attach stream.
func sendStdin(tb testing.TB, ws *websocket.Conn, data []byte) {
	tb.Helper()
	if err := websocket.Message.Send(ws, append([]byte{chanStdin}, data...)); err != nil {
		tb.Fatalf("sending stdin: %v", err)
	}
}

// readStdout reads stdout frames of an attach stream until until(stdout) holds.
func readStdout(tb testing.TB, ws *websocket.Conn, until func([]byte) bool) []byte {
	tb.Helper()
	var out []byte
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for !until(out) {
		var f []byte
		if err := websocket.Message.Receive(ws, &f); err != nil {
			tb.Fatalf("attach stream ended before the expected output (%v); got %q", err, out)
		}
		if len(f) > 0 && f[0] == chanStdout {
			out = append(out, f[1:]...)
		}
	}
	return out
}

package dataplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/test/dpclient"
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

type rawBody = dpclient.RawBody

var (
	sessionPath  = dpclient.SessionPath
	filesPath    = dpclient.FilesPath
	errorCode    = dpclient.Code
	decodeEvents = dpclient.DecodeEvents
	outputOf     = dpclient.Output
	sendStdin    = dpclient.SendStdin
)

// dp is the test server's data-plane client.
func (ts *testServer) dp() dpclient.Client {
	return dpclient.Client{Endpoint: ts.base, HTTP: ts.client}
}

// do sends one request; body is JSON-encoded unless it is a rawBody.
func (ts *testServer) do(tb testing.TB, method, path, token string, body any) (int, []byte) {
	tb.Helper()
	return ts.dp().Call(tb, method, path, token, body)
}

func (ts *testServer) request(ctx context.Context, method, path, token string, body any) (int, []byte, error) {
	return ts.dp().Request(ctx, method, path, token, body)
}

// expect checks status (and code for errors) of one request.
func (ts *testServer) expect(tb testing.TB, method, path, token string, body any, status int, code string) []byte {
	tb.Helper()
	return ts.dp().Expect(tb, method, path, token, body, status, code)
}

// events reads the session's events after since (GET .../events, not followed).
func (ts *testServer) events(tb testing.TB, token, ns, name string, since uint64) []SessionEvent {
	tb.Helper()
	return ts.dp().Events(tb, token, ns, name, since)
}

// follow opens GET .../events?follow=true after since; the stream is the response body.
func (ts *testServer) follow(tb testing.TB, ctx context.Context, token, ns, name string, since uint64) *http.Response {
	tb.Helper()
	return ts.dp().Follow(tb, ctx, token, ns, name, since)
}

// readOutput follows the session's events after since until until(output) holds.
func (ts *testServer) readOutput(tb testing.TB, token, ns, name string, since uint64, until func([]byte) bool) ([]byte, uint64) {
	tb.Helper()
	return ts.dp().FollowOutput(tb, token, ns, name, since, 20*time.Second, until)
}

// expectAttachRefused asks for an attach (stdin or not) and expects the refusal status and code.
func (ts *testServer) expectAttachRefused(tb testing.TB, token, ns, name string, stdin bool, status int, code string) {
	tb.Helper()
	ts.dp().ExpectAttachRefused(tb, token, ns, name, stdin, status, code)
}

// attach opens an attach stream (remote command protocol v5) on session ns/name.
func (ts *testServer) attach(tb testing.TB, token, ns, name string, stdin bool) *websocket.Conn {
	tb.Helper()
	return ts.dp().Attach(tb, token, ns, name, stdin)
}

// readStdout reads stdout frames of an attach stream until until(stdout) holds.
func readStdout(tb testing.TB, ws *websocket.Conn, until func([]byte) bool) []byte {
	tb.Helper()
	return dpclient.ReadStdout(tb, ws, 20*time.Second, until)
}

// parkSignal is a server option whose wait hook signals every stream that parks, so a test
// observes parking instead of sleeping for it.
func parkSignal() (<-chan struct{}, func(*Server)) {
	parked := make(chan struct{}, 16)
	return parked, func(s *Server) {
		s.waitHook = func() {
			select {
			case parked <- struct{}{}:
			default:
			}
		}
	}
}

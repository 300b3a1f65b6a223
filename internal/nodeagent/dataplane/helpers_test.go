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
	"sync"
	"testing"
	"time"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
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
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case rawBody:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, ts.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, raw, err
}

func errorCode(tb testing.TB, body []byte) string {
	tb.Helper()
	var e Error
	if err := json.Unmarshal(body, &e); err != nil {
		tb.Fatalf("error body %q: %v", body, err)
	}
	if e.Message == "" {
		tb.Errorf("error body %q has no message", body)
	}
	return e.Code
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

// events performs one GET .../events.
func (ts *testServer) events(tb testing.TB, token, ns, name string, cursor uint64, waitSeconds int) EventsResponse {
	tb.Helper()
	body := ts.expect(tb, "GET", fmt.Sprintf("%s?cursor=%d&waitSeconds=%d", SessionPath(ns, name, "events"), cursor, waitSeconds), token, nil, 200, "")
	var er EventsResponse
	if err := json.Unmarshal(body, &er); err != nil {
		tb.Fatalf("events body %q: %v", body, err)
	}
	return er
}

// readOutput long-polls events from cursor until until(output) holds or the
// deadline passes, and returns the output and the next cursor.
func (ts *testServer) readOutput(tb testing.TB, token, ns, name string, cursor uint64, until func([]byte) bool) ([]byte, uint64) {
	tb.Helper()
	var out []byte
	deadline := time.Now().Add(20 * time.Second)
	for !until(out) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for session output; got %q", out)
		}
		er := ts.events(tb, token, ns, name, cursor, 10)
		for _, e := range er.Events {
			if e.Kind == ring.KindOutput {
				out = append(out, e.Data...)
			}
		}
		cursor = er.Next
		if er.Closed && !until(out) {
			tb.Fatalf("session closed before the expected output; got %q", out)
		}
	}
	return out, cursor
}

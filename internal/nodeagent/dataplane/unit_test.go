package dataplane

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

func TestGenerateServingCert(t *testing.T) {
	cert, caPEM, err := GenerateServingCert([]string{"127.0.0.1", "node-1.example", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cert.PrivateKey.(*ecdsa.PrivateKey); !ok {
		t.Fatalf("serving key is %T, want ECDSA", cert.PrivateKey)
	}
	block, _ := pem.Decode(caPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("CA PEM does not hold a certificate: %q", caPEM)
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("CA: IsCA=%v alg=%v", ca.IsCA, ca.PublicKeyAlgorithm)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, host := range []string{"127.0.0.1", "node-1.example", "::1"} {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("verifying for %s: %v", host, err)
		}
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example", Roots: pool}); err == nil {
		t.Error("the certificate verified for a host it was not issued for")
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: x509.NewCertPool()}); err == nil {
		t.Error("the certificate verified without its CA")
	}
	for _, bad := range [][]string{nil, {"not a host"}, make([]string, MaxServingCertHosts+1)} {
		if _, _, err := GenerateServingCert(bad); err == nil {
			t.Errorf("GenerateServingCert(%q) succeeded", bad)
		}
	}
}

func TestTTLLRU(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newTTLLRU[int](3, 10*time.Second, func() time.Time { return now })
	for i := range 3 {
		c.add(keyOf("k", string(rune('a'+i))), i)
	}
	if _, ok := c.get(keyOf("k", "a")); !ok { // a is now most recently used
		t.Fatal("a missing")
	}
	c.add(keyOf("k", "d"), 3) // evicts b, the least recently used
	if _, ok := c.get(keyOf("k", "b")); ok {
		t.Error("b survived eviction")
	}
	if c.len() != 3 {
		t.Errorf("len %d, want 3", c.len())
	}
	now = now.Add(10 * time.Second)
	if _, ok := c.get(keyOf("k", "a")); ok {
		t.Error("a survived its TTL")
	}
	if keyOf("ab", "c") == keyOf("a", "bc") {
		t.Error("keyOf is ambiguous")
	}
	off := newTTLLRU[int](3, 0, nil)
	off.add(keyOf("x"), 1)
	if _, ok := off.get(keyOf("x")); ok {
		t.Error("a disabled cache returned an entry")
	}
}

// createOnly is a client whose Create is scripted; every other method panics.
type createOnly struct {
	client.Client
	calls  atomic.Int32
	create func(obj client.Object) error
}

func (c *createOnly) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	c.calls.Add(1)
	return c.create(obj)
}

func TestTokenReviewCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &createOnly{create: func(obj client.Object) error {
		tr := obj.(*authenticationv1.TokenReview)
		if tr.Spec.Token == "good" {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}
		}
		return nil
	}}
	a, err := NewTokenReviewAuthenticator(c, TokenReviewOptions{Cache: CacheOptions{Now: func() time.Time { return now }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		u, err := a.AuthenticateToken(ctx, "good")
		if err != nil || u.Username != "alice" {
			t.Fatalf("good token: %v, %v", u, err)
		}
	}
	if n := c.calls.Load(); n != 1 {
		t.Errorf("%d TokenReviews for a cached token, want 1", n)
	}
	now = now.Add(MaxCacheTTL)
	if _, err := a.AuthenticateToken(ctx, "good"); err != nil {
		t.Fatal(err)
	}
	if n := c.calls.Load(); n != 2 {
		t.Errorf("%d TokenReviews after the TTL, want 2", n)
	}
	for range 2 {
		if _, err := a.AuthenticateToken(ctx, "bad"); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("bad token: %v", err)
		}
	}
	if n := c.calls.Load(); n != 4 {
		t.Errorf("%d TokenReviews, want 4 (negative results are not cached)", n)
	}
	if _, err := a.AuthenticateToken(ctx, strings.Repeat("x", MaxTokenBytes+1)); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("oversized token: %v", err)
	}
	c.create = func(client.Object) error { return errors.New("connection refused") }
	if _, err := a.AuthenticateToken(ctx, "other"); err == nil || errors.Is(err, ErrUnauthenticated) {
		t.Errorf("API failure must not read as unauthenticated: %v", err)
	}
	if _, err := NewTokenReviewAuthenticator(c, TokenReviewOptions{Cache: CacheOptions{TTL: MaxCacheTTL + 1}}); err == nil {
		t.Error("a TTL above MaxCacheTTL was accepted")
	}
	if _, err := NewTokenReviewAuthenticator(c, TokenReviewOptions{Cache: CacheOptions{Size: MaxCacheEntries + 1}}); err == nil {
		t.Error("a cache above MaxCacheEntries was accepted")
	}
}

func TestSubjectAccessReviewCache(t *testing.T) {
	var last authorizationv1.SubjectAccessReviewSpec
	c := &createOnly{create: func(obj client.Object) error {
		sar := obj.(*authorizationv1.SubjectAccessReview)
		last = sar.Spec
		sar.Status.Allowed = sar.Spec.ResourceAttributes.Subresource == "screen"
		return nil
	}}
	z, err := NewSubjectAccessReviewAuthorizer(c, CacheOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := &authenticationv1.UserInfo{Username: "bob", Groups: []string{"g2", "g1"}, Extra: map[string]authenticationv1.ExtraValue{"k": {"v"}}}
	screen := Attributes{Verb: "get", Namespace: "ns", Resource: "terminalsessions", Subresource: "screen", Name: "s"}
	input := Attributes{Verb: "create", Namespace: "ns", Resource: "terminalsessions", Subresource: "input", Name: "s"}
	for range 2 {
		if d, err := z.Authorize(context.Background(), u, screen); err != nil || !d.Allowed {
			t.Fatalf("screen: %v %v", d, err)
		}
		if d, err := z.Authorize(context.Background(), u, input); err != nil || d.Allowed {
			t.Fatalf("input: %v %v", d, err)
		}
	}
	if n := c.calls.Load(); n != 3 {
		t.Errorf("%d SubjectAccessReviews, want 3 (allowed cached, denied not)", n)
	}
	ra := last.ResourceAttributes
	if last.User != "bob" || ra.Group != "workbench.sensorium.dev" || ra.Resource != "terminalsessions" ||
		ra.Subresource != "input" || ra.Verb != "create" || ra.Namespace != "ns" || ra.Name != "s" || last.Extra["k"][0] != "v" {
		t.Errorf("unexpected SubjectAccessReview spec %+v / %+v", last, ra)
	}
	// Same groups in another order hit the cache; another name does not.
	if _, err := z.Authorize(context.Background(), &authenticationv1.UserInfo{Username: "bob", Groups: []string{"g1", "g2"}, Extra: u.Extra}, screen); err != nil {
		t.Fatal(err)
	}
	if n := c.calls.Load(); n != 3 {
		t.Errorf("group order changed the cache key")
	}
	other := screen
	other.Name = "t"
	if _, err := z.Authorize(context.Background(), u, other); err != nil {
		t.Fatal(err)
	}
	if n := c.calls.Load(); n != 4 {
		t.Errorf("another object name hit the cache")
	}
}

func TestLimits(t *testing.T) {
	l, err := Limits{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if l.MaxLongPolls != DefaultMaxLongPolls || l.MaxWait != MaxWait || l.MaxBodyBytes != MaxBodyBytes ||
		l.MaxInputBytes != MaxInputBytes || l.MaxReadBytes != MaxReadBytes {
		t.Errorf("defaults: %+v", l)
	}
	for _, bad := range []Limits{
		{MaxWait: MaxWait + time.Second}, {MaxBodyBytes: MaxBodyBytes + 1}, {MaxReadBytes: MaxReadBytes + 1},
		{MaxInputBytes: MaxInputBytes + 1}, {MaxLongPolls: 10, MaxInFlight: 5}, {MaxInFlight: -1},
		{RequestTimeout: -time.Second},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("limits %+v accepted", bad)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{actuation.Refusef(actuation.CodeQueueFull, "x"), 429, "queue-full"},
		{actuation.Refusef(actuation.CodeReaderCapReached, "x"), 429, "reader-cap-reached"},
		{actuation.Refusef(actuation.CodeSessionNotRunning, "x"), 409, "session-not-running"},
		{actuation.Refusef(actuation.CodeInvalidSpec, "x"), 400, "invalid-spec"},
		{actuation.Refusef(actuation.CodeSymlinkEscape, "x"), 403, "symlink-escape"},
		{actuation.Refusef(actuation.CodePathNotFound, "x"), 404, "path-not-found"},
		{actuation.Refuse(actuation.CodePathTraversal, "path", "x"), 400, "path-traversal"},
		{errors.Join(errors.New("resolving"), ErrNotFound), 404, "not-found"},
		{actuation.Refusef(actuation.CodeEnvironmentUnavailable, "x"), 503, "environment-unavailable"},
		{errors.New("boom"), 500, "internal"},
	} {
		status, body, _ := classify(tc.err)
		if status != tc.status || body.Code != tc.code {
			t.Errorf("classify(%v) = %d %s, want %d %s", tc.err, status, body.Code, tc.status, tc.code)
		}
	}
}

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		h    []string
		want string
		ok   bool
	}{
		{nil, "", false},
		{[]string{"Bearer abc"}, "abc", true},
		{[]string{"bearer  abc "}, "abc", true},
		{[]string{"Basic abc"}, "", false},
		{[]string{"Bearer "}, "", false},
		{[]string{"Bearer a", "Bearer b"}, "", false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for _, v := range tc.h {
			r.Header.Add("Authorization", v)
		}
		got, ok := bearerToken(r)
		if got != tc.want || ok != tc.ok {
			t.Errorf("bearerToken(%q) = %q %v", tc.h, got, ok)
		}
	}
}

// staticAuth authenticates "op" as an operator and "viewer" as a viewer and
// allows the operator everything and the viewer screen and events.
type staticAuth struct{}

func (staticAuth) AuthenticateToken(_ context.Context, token string) (*authenticationv1.UserInfo, error) {
	switch token {
	case "op", "viewer":
		return &authenticationv1.UserInfo{Username: token}, nil
	case "down":
		return nil, errors.New("connection refused")
	}
	return nil, ErrUnauthenticated
}

func (staticAuth) Authorize(_ context.Context, u *authenticationv1.UserInfo, a Attributes) (Decision, error) {
	return Decision{Allowed: u.Username == "op" || a.Verb == "get" && a.Resource == "terminalsessions"}, nil
}

// TestRoutingWithoutAPIServer covers routing, limits and error bodies with a
// static authenticator (the envtest suite covers TokenReview and
// SubjectAccessReview).
func TestRoutingWithoutAPIServer(t *testing.T) {
	ts := startServer(t, staticAuth{}, staticAuth{}, Limits{})
	ts.openSession(t, "ns", "s", "OperatorOnly", 0)
	for _, tc := range []struct {
		name, method, path, token string
		body                      any
		raw                       string
		status                    int
		code                      string
	}{
		{"no token", "GET", sessionPath("ns", "s", "screen"), "", nil, "", 401, string(actuation.CodeUnauthenticated)},
		{"bad token", "GET", sessionPath("ns", "s", "screen"), "nope", nil, "", 401, string(actuation.CodeUnauthenticated)},
		{"authn down", "GET", sessionPath("ns", "s", "screen"), "down", nil, "", 503, string(actuation.CodeUnavailable)},
		{"unknown route", "GET", "/v2/whatever", "op", nil, "", 404, string(actuation.CodeNotFound)},
		{"v1 route", "GET", "/v1/namespaces/ns/terminalsessions/s/screen", "op", nil, "", 404, string(actuation.CodeNotFound)},
		{"wrong method", "GET", sessionPath("ns", "s", "signal"), "op", nil, "", 405, string(actuation.CodeMethodNotAllowed)},
		{"bad namespace", "GET", sessionPath("NS", "s", "screen"), "op", nil, "", 400, string(actuation.CodeBadRequest)},
		{"unknown session", "GET", sessionPath("ns", "missing", "screen"), "op", nil, "", 404, string(actuation.CodeNotFound)},
		{"viewer signal", "POST", sessionPath("ns", "s", "signal"), "viewer", SignalRequest{Signal: "SIGCONT"}, "", 403, string(actuation.CodeForbidden)},
		{"body too large", "POST", sessionPath("ns", "s", "signal"), "op", nil, `{"signal":"` + strings.Repeat("A", 70<<10) + `"}`, 413, string(actuation.CodeBodyTooLarge)},
		{"empty signal", "POST", sessionPath("ns", "s", "signal"), "op", SignalRequest{}, "", 400, string(actuation.CodeBadRequest)},
		{"unknown field", "POST", sessionPath("ns", "s", "signal"), "op", nil, `{"signal":"SIGCONT","x":1}`, 400, string(actuation.CodeBadRequest)},
		{"trailing data", "POST", sessionPath("ns", "s", "signal"), "op", nil, `{"signal":"SIGCONT"} {}`, 400, string(actuation.CodeBadRequest)},
		{"bad field type", "POST", sessionPath("ns", "s", "resize"), "op", nil, `{"rows":"x","cols":80}`, 400, string(actuation.CodeBadRequest)},
		{"bad signal", "POST", sessionPath("ns", "s", "signal"), "op", SignalRequest{Signal: "SIGSEGV"}, "", 400, string(actuation.CodeBadRequest)},
		{"bad size", "POST", sessionPath("ns", "s", "resize"), "op", ResizeRequest{Rows: 0, Cols: 80}, "", 400, string(actuation.CodeInvalidSpec)},
		{"bad cursor", "GET", sessionPath("ns", "s", "events") + "?since=x", "op", nil, "", 400, string(actuation.CodeBadRequest)},
		{"cursor ahead", "GET", sessionPath("ns", "s", "events") + "?since=100000", "op", nil, "", 400, string(actuation.CodeBadRequest)},
		{"attach without upgrade", "GET", sessionPath("ns", "s", "attach"), "op", nil, "", 400, string(actuation.CodeBadRequest)},
		{"signal ok", "POST", sessionPath("ns", "s", "signal"), "op", SignalRequest{Signal: "SIGCONT"}, "", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := any(tc.body)
			if tc.raw != "" {
				body = rawBody(tc.raw)
			}
			status, resp := ts.do(t, tc.method, tc.path, tc.token, body)
			if status != tc.status {
				t.Fatalf("status %d, want %d; body %s", status, tc.status, resp)
			}
			if tc.code != "" {
				if got := errorCode(t, resp); got != tc.code {
					t.Fatalf("code %q, want %q; body %s", got, tc.code, resp)
				}
			}
		})
	}
}

// TestAttachInputWithoutAPIServer: stdin needs create on terminalsessions/attach (the
// viewer's is refused before the handshake); the operator's reaches the program.
func TestAttachInputWithoutAPIServer(t *testing.T) {
	ts := startServer(t, staticAuth{}, staticAuth{}, Limits{})
	ts.openSession(t, "ns", "s", "OperatorOnly", 0)
	ts.expectAttachRefused(t, "viewer", "ns", "s", true, 403, string(actuation.CodeForbidden))
	ts.expectAttachRefused(t, "op", "ns", "missing", true, 404, string(actuation.CodeNotFound))
	ws := ts.attach(t, "op", "ns", "s", true)
	sendStdin(t, ws, []byte("x\n"))
	readStdout(t, ws, func(b []byte) bool { return bytes.Count(b, []byte("x")) >= 2 })
}

// TestServeShutdown: cancelling the context releases a parked long-poll and
// ServeListener returns without error.
func TestServeShutdown(t *testing.T) {
	cert, _, err := GenerateServingCert([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	mgr := session.NewManager(session.Caps{})
	srv, err := New(Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}, Authenticator: staticAuth{}, Authorizer: staticAuth{}, Resolver: &fakeResolver{mgr: mgr}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeListener(ctx, ln) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeListener: %v", err)
		}
	case <-time.After(DefaultShutdownTimeout + 5*time.Second):
		t.Fatal("ServeListener did not return after cancellation")
	}
	if _, err := New(Config{Authenticator: staticAuth{}, Authorizer: staticAuth{}, Resolver: &fakeResolver{}}); err == nil {
		t.Error("New accepted a config without TLS")
	}
}

// recordingFiles is a Files that is not a host directory (as a VM guest's root is): it
// records the calls it receives and answers from a map.
type recordingFiles struct {
	mu    sync.Mutex
	calls []string
	files map[string]string
	err   error
}

func (f *recordingFiles) Snapshot(ctx context.Context, rel string, _ fsaccess.SnapshotLimits) (*fsaccess.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "snapshot "+rel)
	if ctx == nil || f.err != nil {
		return nil, f.err
	}
	return &fsaccess.Snapshot{Root: rel, Entries: []fsaccess.Entry{}}, nil
}

func (f *recordingFiles) Read(ctx context.Context, rel string, offset int64, maxBytes int) (*fsaccess.ReadResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("read %s %d %d", rel, offset, maxBytes))
	if f.err != nil {
		return nil, f.err
	}
	c, ok := f.files[rel]
	if !ok {
		return nil, actuation.Refusef(actuation.CodePathNotFound, "%s", rel)
	}
	return &fsaccess.ReadResult{Path: rel, Data: []byte(c), Size: int64(len(c)), EOF: true, Digest: fsaccess.DigestBytes([]byte(c))}, nil
}

// TestFilesOfAnyRoot: the file routes serve any Files implementation; paths are refused
// before the root is called, and the root's coded errors map onto the same responses.
func TestFilesOfAnyRoot(t *testing.T) {
	ts := startServer(t, staticAuth{}, staticAuth{}, Limits{})
	f := &recordingFiles{files: map[string]string{"a.txt": "inside\n"}}
	ts.addFiles("ns", "vm", "repo", f)
	status, body := ts.do(t, "GET", filesPath("ns", "vm")+"?op=read&root=repo&path=a.txt", "op", nil)
	if status != 200 || string(body) != "inside\n" {
		t.Fatalf("read: %d %s", status, body)
	}
	for _, tc := range []struct {
		path   string
		status int
		code   string
	}{
		{"?root=repo&path=../../etc/passwd", 400, "path-traversal"},
		{"?root=repo&path=/etc/passwd", 400, "path-absolute"},
		{"?root=repo&path=a/./b", 400, "path-invalid-component"},
		{"?root=repo&path=missing", 404, "path-not-found"},
	} {
		status, body := ts.do(t, "GET", filesPath("ns", "vm")+"?op=read&"+tc.path[1:], "op", nil)
		if status != tc.status || errorCode(t, body) != tc.code {
			t.Fatalf("read %s: %d %s, want %d %s", tc.path, status, body, tc.status, tc.code)
		}
	}
	if status, body := ts.do(t, "GET", filesPath("ns", "vm")+"?root=repo&path=../x", "op", nil); status != 400 || errorCode(t, body) != "path-traversal" {
		t.Fatalf("snapshot traversal: %d %s", status, body)
	}
	f.mu.Lock()
	calls := strings.Join(f.calls, "; ")
	f.err = actuation.Refusef(actuation.CodeEnvironmentUnavailable, "the guest did not answer")
	f.mu.Unlock()
	if calls != fmt.Sprintf("read a.txt 0 %d; read missing 0 %d", MaxReadBytes, MaxReadBytes) {
		t.Fatalf("the root saw %q (refused paths must never reach it)", calls)
	}
	if status, body := ts.do(t, "GET", filesPath("ns", "vm")+"?root=repo", "op", nil); status != 503 || errorCode(t, body) != "environment-unavailable" {
		t.Fatalf("unavailable root: %d %s", status, body)
	}
}

package egress

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/procexec"
)

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper()
	os.Exit(m.Run())
}

const bigSize = 1 << 20

// fixture is an HTTPS server on this machine's loopback, reachable as
// "example.com" (the name its certificate carries) through the proxy's
// host-side dialer, plus a CA file the sandbox can read.
type fixture struct {
	srv  *httptest.Server
	port int
	dir  string // readable root holding ca.pem
	ca   string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("egress tests enter network namespaces and start sandboxes: run as root (as CI does)")
	}
	for _, p := range []string{"/usr/bin/curl", "/usr/bin/getent"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not installed on this machine: %v", p, err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the endpoint\n") })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(bigSize))
		_, _ = w.Write(bytes.Repeat([]byte("x"), bigSize))
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, ps, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(ps)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return &fixture{srv: srv, port: port, dir: dir, ca: ca}
}

// dialer resolves example.com to this machine's loopback on the host side
// (the endpoint's real address in this test); every other name as usual.
func dialer(ctx context.Context, network, addr string) (net.Conn, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if h == "example.com" {
		h = "127.0.0.1"
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort(h, p))
}

// run runs argv in a sandbox with the proxy attached and returns the output,
// the exit code and the transcript.
func run(t *testing.T, f *fixture, pol Policy, argv ...string) (string, int, Transcript) {
	t.Helper()
	px, err := New(pol, Options{Dial: dialer})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r := procexec.NewRunner(procexec.Limits{})
	res, err := r.Run(context.Background(), procexec.Spec{
		Argv:          argv,
		Env:           append([]string{"PATH=/usr/bin:/bin"}, px.Env()...),
		ReadableRoots: []string{f.dir},
		Timeout:       60 * time.Second,
		OnSandbox:     px.Attach,
	})
	tr := px.Close()
	if err != nil {
		t.Fatalf("run %v: %v", argv, err)
	}
	t.Logf("%v: exit %d, output %q, transcript %+v", argv, res.ExitCode, res.Output, tr)
	return string(res.Output), res.ExitCode, tr
}

func (f *fixture) policy() Policy {
	return Policy{
		Endpoints:             []Endpoint{{Host: "example.com", Port: f.port, Protocol: ProtocolHTTPS}},
		MaxBytesTotal:         4 << 20,
		MaxBytesPerConnection: 2 << 20,
	}
}

func (f *fixture) url(path string) string {
	return "https://example.com:" + strconv.Itoa(f.port) + path
}

func one(t *testing.T, tr Transcript) Connection {
	t.Helper()
	if len(tr.Connections) != 1 {
		t.Fatalf("want exactly one recorded connection, got %+v", tr.Connections)
	}
	return tr.Connections[0]
}

func TestAllowedHTTPSThroughProxy(t *testing.T) {
	f := newFixture(t)
	out, code, tr := run(t, f, f.policy(), "/usr/bin/curl", "-sS", "--cacert", f.ca, f.url("/hello"))
	if code != 0 || !strings.Contains(out, "hello from the endpoint") {
		t.Fatalf("allowed endpoint through the proxy: exit %d, output %q", code, out)
	}
	c := one(t, tr)
	if c.Host != "example.com" || c.Port != f.port || c.Protocol != ProtocolHTTPS || c.Via != "connect" || c.Outcome != OutcomeOK || c.Code != "" {
		t.Errorf("transcript entry %+v", c)
	}
	if c.BytesOut == 0 || c.BytesIn == 0 || tr.BytesTotal != c.BytesOut+c.BytesIn {
		t.Errorf("byte counts: out %d in %d total %d", c.BytesOut, c.BytesIn, tr.BytesTotal)
	}
}

func TestAllowedHTTPSThroughResolverAndForward(t *testing.T) {
	f := newFixture(t)
	// No proxy: the name resolves (sandbox resolver, see TestDNSOnlyForDeclaredNames)
	// to the endpoint's forward address, where the agent relays to the real
	// endpoint. curl's own resolver needs socketpair(2), which the sandbox's
	// seccomp filter denies, so the test hands curl the address the resolver
	// answers.
	fwd, ok := mustProxy(t, f.policy()).ForwardAddr("example.com")
	if !ok || fwd.String() != "127.77.0.1" {
		t.Fatalf("forward address of example.com: %v %v", fwd, ok)
	}
	out, code, tr := run(t, f, f.policy(), "/usr/bin/curl", "-sS", "--noproxy", "*", "--resolve", "example.com:"+strconv.Itoa(f.port)+":"+fwd.String(),
		"--cacert", f.ca, f.url("/hello"))
	if code != 0 || !strings.Contains(out, "hello from the endpoint") {
		t.Fatalf("allowed endpoint through the forward: exit %d, output %q", code, out)
	}
	c := one(t, tr)
	if c.Via != "forward" || c.Outcome != OutcomeOK || c.Host != "example.com" {
		t.Errorf("transcript entry %+v", c)
	}
}

func mustProxy(t *testing.T, p Policy) *Proxy {
	t.Helper()
	px, err := New(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return px
}

func TestUndeclaredEndpointRefused(t *testing.T) {
	f := newFixture(t)
	// The same host on another port, through the proxy.
	other := httptest.NewTLSServer(http.NotFoundHandler())
	defer other.Close()
	_, op, _ := net.SplitHostPort(other.Listener.Addr().String())
	out, code, tr := run(t, f, f.policy(), "/usr/bin/curl", "-sS", "--cacert", f.ca, "https://example.com:"+op+"/")
	if code == 0 {
		t.Fatalf("undeclared endpoint reached: %q", out)
	}
	c := one(t, tr)
	if c.Outcome != OutcomeRefused || c.Code != string(actuation.CodeEgressEndpointForbidden) || c.BytesIn != 0 || c.BytesOut != 0 {
		t.Errorf("transcript entry %+v", c)
	}
	if tr.Code != string(actuation.CodeEgressEndpointForbidden) {
		t.Errorf("transcript code %q", tr.Code)
	}
}

func TestDirectConnectionHasNoRoute(t *testing.T) {
	f := newFixture(t)
	// The endpoint's real address on the host, without the proxy: the
	// sandbox's loopback is its own (nothing listens there).
	out, code, tr := run(t, f, f.policy(), "/usr/bin/curl", "-sS", "--noproxy", "*", "--connect-timeout", "5",
		"--cacert", f.ca, "https://127.0.0.1:"+strconv.Itoa(f.port)+"/hello")
	if code == 0 || strings.Contains(out, "hello from the endpoint") {
		t.Fatalf("direct connection reached the endpoint: exit %d %q", code, out)
	}
	if code != 7 { // curl: failed to connect
		t.Errorf("curl exit %d, want 7 (could not connect)", code)
	}
	// A non-loopback address: no route at all.
	out, code, _ = run(t, f, f.policy(), "/usr/bin/curl", "-sS", "--noproxy", "*", "--connect-timeout", "5", "http://192.0.2.1:80/")
	if code != 7 {
		t.Errorf("non-loopback address: exit %d %q, want 7 (could not connect)", code, out)
	}
	if len(tr.Connections) != 0 {
		t.Errorf("the proxy saw connections: %+v", tr.Connections)
	}
}

func TestDNSOnlyForDeclaredNames(t *testing.T) {
	f := newFixture(t)
	out, code, tr := run(t, f, f.policy(), "/usr/bin/getent", "ahostsv4", "example.com")
	if code != 0 || !strings.HasPrefix(out, "127.77.0.1") {
		t.Errorf("declared name: exit %d %q", code, out)
	}
	if len(tr.DNS) == 0 || tr.DNS[0].Name != "example.com" || !tr.DNS[0].Allowed || tr.Code != "" {
		t.Errorf("DNS transcript %+v", tr)
	}
	out, code, tr = run(t, f, f.policy(), "/usr/bin/getent", "ahostsv4", "not-declared.example.org")
	if code != 2 || out != "" {
		t.Errorf("undeclared name resolved: exit %d %q", code, out)
	}
	if len(tr.DNS) == 0 || tr.DNS[0].Name != "not-declared.example.org" || tr.DNS[0].Allowed {
		t.Errorf("DNS transcript %+v", tr.DNS)
	}
	if tr.Code != string(actuation.CodeEgressDNSNameForbidden) {
		t.Errorf("transcript code %q", tr.Code)
	}
}

func TestPerConnectionByteCapCutsDownload(t *testing.T) {
	f := newFixture(t)
	pol := f.policy()
	pol.MaxBytesPerConnection = 64 << 10
	out, code, tr := run(t, f, pol, "/usr/bin/curl", "-sS", "-o", "/dev/null", "--cacert", f.ca, f.url("/big"))
	if code == 0 {
		t.Fatalf("1 MiB download under a 64 KiB cap succeeded: %q", out)
	}
	c := one(t, tr)
	if c.Outcome != OutcomeCut || c.Code != string(actuation.CodeEgressByteCapReached) {
		t.Errorf("transcript entry %+v", c)
	}
	if got := c.BytesIn + c.BytesOut; got != pol.MaxBytesPerConnection {
		t.Errorf("relayed %d bytes, want exactly the cap %d", got, pol.MaxBytesPerConnection)
	}
}

func TestTotalByteCapAcrossConnections(t *testing.T) {
	f := newFixture(t)
	pol := f.policy()
	pol.MaxBytesTotal = 8 << 10
	// Several small requests: the first ones pass, the total cap cuts a later one
	// and refuses what follows.
	_, code, tr := run(t, f, pol, "/usr/bin/curl", "-sS", "--cacert", f.ca,
		f.url("/hello"), "--next", "--cacert", f.ca, f.url("/big"), "--next", "--cacert", f.ca, f.url("/hello"))
	if code == 0 {
		t.Fatalf("downloads above the total cap succeeded")
	}
	if tr.BytesTotal != pol.MaxBytesTotal {
		t.Errorf("relayed %d bytes in total, want exactly the cap %d", tr.BytesTotal, pol.MaxBytesTotal)
	}
	cut := false
	for _, c := range tr.Connections {
		if c.Code == string(actuation.CodeEgressTotalByteCapReached) {
			cut = true
		}
	}
	if !cut || tr.Code != string(actuation.CodeEgressTotalByteCapReached) {
		t.Errorf("no connection cut at the total cap: %+v", tr)
	}
}

func TestProtocolMismatchRefused(t *testing.T) {
	f := newFixture(t)
	// Plain HTTP to an https endpoint through the forward address.
	p := strconv.Itoa(f.port)
	_, code, tr := run(t, f, f.policy(), "/usr/bin/curl", "-sS", "--noproxy", "*", "--resolve", "example.com:"+p+":127.77.0.1", "http://example.com:"+p+"/hello")
	if code == 0 {
		t.Fatal("plain HTTP to an https endpoint succeeded")
	}
	c := one(t, tr)
	if c.Outcome != OutcomeRefused || c.Code != string(actuation.CodeEgressProtocolMismatch) || c.BytesOut != 0 {
		t.Errorf("transcript entry %+v", c)
	}
}

func TestPlainHTTPThroughProxy(t *testing.T) {
	f := newFixture(t)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "plain ok") }))
	defer plain.Close()
	_, pp, _ := net.SplitHostPort(plain.Listener.Addr().String())
	port, _ := strconv.Atoi(pp)
	pol := f.policy()
	pol.Endpoints = append(pol.Endpoints, Endpoint{Host: "example.com", Port: port, Protocol: ProtocolHTTP})
	out, code, tr := run(t, f, pol, "/usr/bin/curl", "-sS", "http://example.com:"+pp+"/x")
	if code != 0 || out != "plain ok" {
		t.Fatalf("http endpoint through the proxy: exit %d %q", code, out)
	}
	c := one(t, tr)
	if c.Via != "http" || c.Outcome != OutcomeOK || c.Protocol != ProtocolHTTP {
		t.Errorf("transcript entry %+v", c)
	}
}

func TestValidatePolicy(t *testing.T) {
	ok := Endpoint{Host: "example.com", Port: 443, Protocol: ProtocolHTTPS}
	cases := []struct {
		name string
		p    Policy
		code string
	}{
		{"valid", Policy{Endpoints: []Endpoint{ok}, MaxBytesTotal: 1, MaxBytesPerConnection: 1}, ""},
		{"no endpoints", Policy{MaxBytesTotal: 1, MaxBytesPerConnection: 1}, string(actuation.CodeInvalidSpec)},
		{"zero total", Policy{Endpoints: []Endpoint{ok}, MaxBytesPerConnection: 1}, string(actuation.CodeInvalidSpec)},
		{"zero per connection", Policy{Endpoints: []Endpoint{ok}, MaxBytesTotal: 1}, string(actuation.CodeInvalidSpec)},
		{"udp", Policy{Endpoints: []Endpoint{{Host: "example.com", Port: 53, Protocol: ProtocolUDP}}, MaxBytesTotal: 1, MaxBytesPerConnection: 1}, string(actuation.CodeEgressProtocolUnsupported)},
		{"unknown protocol", Policy{Endpoints: []Endpoint{{Host: "example.com", Port: 1, Protocol: "ftp"}}, MaxBytesTotal: 1, MaxBytesPerConnection: 1}, string(actuation.CodeInvalidSpec)},
		{"port 0", Policy{Endpoints: []Endpoint{{Host: "example.com", Port: 0, Protocol: ProtocolTCP}}, MaxBytesTotal: 1, MaxBytesPerConnection: 1}, string(actuation.CodeInvalidSpec)},
		{"port too high", Policy{Endpoints: []Endpoint{{Host: "example.com", Port: 70000, Protocol: ProtocolTCP}}, MaxBytesTotal: 1, MaxBytesPerConnection: 1}, string(actuation.CodeInvalidSpec)},
		{"bad host", Policy{Endpoints: []Endpoint{{Host: "a b", Port: 1, Protocol: ProtocolTCP}}, MaxBytesTotal: 1, MaxBytesPerConnection: 1}, string(actuation.CodeInvalidSpec)},
		{"empty host", Policy{Endpoints: []Endpoint{{Host: "", Port: 1, Protocol: ProtocolTCP}}, MaxBytesTotal: 1, MaxBytesPerConnection: 1}, string(actuation.CodeInvalidSpec)},
		{"ip literal", Policy{Endpoints: []Endpoint{{Host: "10.0.0.1", Port: 1, Protocol: ProtocolTCP}}, MaxBytesTotal: 1, MaxBytesPerConnection: 1}, ""},
	}
	for _, c := range cases {
		err := ValidatePolicy(c.p)
		got := ""
		if err != nil {
			got = codeOf(err)
		}
		if got != c.code {
			t.Errorf("%s: code %q (%v), want %q", c.name, got, err, c.code)
		}
	}
}

func codeOf(err error) string { return string(actuation.CodeOf(err)) }

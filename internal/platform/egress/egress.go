// Package egress is the node-side network boundary of an action's sandbox
// (seed 002, class C4 egress-network-spawn).
//
// A sandboxed program runs in its own network namespace whose only interface
// is loopback (see internal/platform/procexec): it has no route anywhere. A
// Proxy attaches listening sockets INSIDE that namespace, created from the
// agent by entering the namespace on one locked thread (setns) and leaving it
// again; connections accepted there are served by the agent, which dials the
// declared endpoint from the host's namespace. Nothing else of the host's
// network is reachable: a client that ignores the proxy connects to its own
// loopback (nothing listens) or to an address without a route.
//
// Inside the sandbox:
//
//   - 127.0.0.1:3128 is an HTTP proxy: CONNECT host:port (any declared
//     endpoint) and absolute-form requests ("GET http://host:port/...") to
//     declared http endpoints. The program's environment names it
//     (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and their lower-case forms).
//   - 127.0.0.1:53/udp is a resolver that answers only the declared host
//     names, each with a loopback address of its own (127.77.0.N); every
//     other name is NXDOMAIN. The sandbox has no resolv.conf, so the C
//     library and Go both ask 127.0.0.1:53.
//   - 127.77.0.N:port forwards each declared (host, port) endpoint, so a
//     client that resolves the name and connects "directly" reaches the
//     endpoint through the agent too (TLS still verifies the real name).
//
// Every connection is checked against the declared (host, port, protocol)
// endpoints before anything is dialled; https endpoints must carry a TLS
// handshake and http endpoints an HTTP request (first bytes checked), tcp is
// carried as is. Bytes are counted in both directions against a
// per-connection and a total cap while they stream: the copy stops exactly at
// the cap and the connection is cut. Every connection and DNS question is
// recorded in a bounded Transcript. UDP endpoints are not carried: a policy
// naming one is refused (fail closed) with CodeProtocolUnsupported.
//
// No Kubernetes types are used here.
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sensorium.dev/workbench/internal/actuation"
)

// Addresses inside the sandbox's network namespace.
const (
	ProxyAddr = "127.0.0.1:3128"
	DNSAddr   = "127.0.0.1:53"
	// forwardPrefix: endpoint host i (in declaration order of distinct
	// hosts) is forwarded at 127.77.0.(i+1).
	forwardPrefix = "127.77.0."
)

// Protocols of a declared endpoint.
type Protocol string

// Declared endpoint protocols (seed 002 egress_network.endpoints[].protocol).
const (
	ProtocolTCP   Protocol = "tcp"
	ProtocolHTTP  Protocol = "http"
	ProtocolHTTPS Protocol = "https"
	ProtocolUDP   Protocol = "udp" // not carried: refused with CodeProtocolUnsupported
)

// Outcomes of a recorded connection.
const (
	OutcomeOK      = "ok"      // both sides ended normally
	OutcomeRefused = "refused" // not a declared endpoint (or protocol mismatch): nothing relayed
	OutcomeCut     = "cut"     // a byte cap was reached: relayed up to the cap, then closed
	OutcomeFailed  = "failed"  // the endpoint could not be dialled
	OutcomeClosed  = "closed"  // still open when the proxy closed (the run ended)
)

// Caps.
const (
	MaxEndpoints       = 32
	MaxHostLen         = 253
	MaxConnections     = 32  // concurrent connections per proxy (CodeConnectionCap beyond)
	MaxTranscript      = 256 // recorded connections; later ones only counted (Dropped)
	MaxDNSTranscript   = 256 // recorded DNS questions; later ones only counted
	DefaultDialTimeout = 10 * time.Second
	// peekTimeout bounds the wait for a client's first bytes (protocol check).
	peekTimeout = 10 * time.Second
	// maxRequestHeader bounds a proxy request's header block.
	maxRequestHeader = 16 << 10
	copyChunk        = 32 << 10
)

// Endpoint is one declared destination.
type Endpoint struct {
	Host     string   `json:"host"`
	Port     int      `json:"port"`
	Protocol Protocol `json:"protocol"`
}

func (e Endpoint) String() string {
	return string(e.Protocol) + "://" + net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
}

// Policy is a C4 envelope.
type Policy struct {
	Endpoints []Endpoint
	// MaxBytesTotal and MaxBytesPerConnection count bytes in both directions
	// (client to endpoint and back); both must be > 0.
	MaxBytesTotal         int64
	MaxBytesPerConnection int64
}

// Options are the host-side settings.
type Options struct {
	// Dial dials a declared endpoint from the host's network namespace
	// (default: a net.Dialer with DialTimeout).
	Dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	DialTimeout time.Duration
}

// Connection is one recorded connection.
type Connection struct {
	Host     string        `json:"host"`
	Port     int           `json:"port"`
	Protocol Protocol      `json:"protocol,omitempty"` // the declared protocol ("" when not declared)
	Via      string        `json:"via"`                // connect | http | forward
	BytesOut int64         `json:"bytesOut"`           // program to endpoint
	BytesIn  int64         `json:"bytesIn"`            // endpoint to program
	Duration time.Duration `json:"duration"`
	Outcome  string        `json:"outcome"`
	Code     string        `json:"code,omitempty"`
}

// DNSQuestion is one recorded DNS question.
type DNSQuestion struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Allowed bool   `json:"allowed"`
}

// Transcript is what a proxy saw.
type Transcript struct {
	Connections []Connection  `json:"connections"`
	DNS         []DNSQuestion `json:"dns,omitempty"`
	// Dropped counts connections and DNS questions beyond the caps of the
	// transcript (they were served or refused all the same).
	Dropped    int   `json:"dropped,omitempty"`
	BytesTotal int64 `json:"bytesTotal"`
	// Code is the first cap or refusal code met (empty when none).
	Code string `json:"code,omitempty"`
}

// Proxy serves one sandbox. Create it with New, attach it to the sandbox
// with Attach (procexec.Spec.OnSandbox), pass Env to the program, and Close it
// when the program has ended.
type Proxy struct {
	policy  Policy
	opts    Options
	hosts   map[string]netip.Addr // declared host (lower case) -> forward address
	allowed map[Endpoint]bool

	total atomic.Int64 // bytes relayed (both directions, all connections)

	mu        sync.Mutex
	closed    bool
	listeners []io.Closer
	conns     map[net.Conn]struct{}
	active    int
	tr        Transcript
	wg        sync.WaitGroup
	cancel    context.CancelFunc
	ctx       context.Context
}

// ValidatePolicy checks a C4 envelope. A UDP endpoint is refused with
// CodeProtocolUnsupported (this node cannot carry it: the class is
// unavailable for that action, never weakened).
func ValidatePolicy(p Policy) error {
	if len(p.Endpoints) == 0 || len(p.Endpoints) > MaxEndpoints {
		return actuation.Refusef(actuation.CodeInvalidSpec, "egress: %d endpoints (want 1..%d)", len(p.Endpoints), MaxEndpoints)
	}
	if p.MaxBytesTotal <= 0 || p.MaxBytesPerConnection <= 0 {
		return actuation.Refusef(actuation.CodeInvalidSpec, "egress: byte caps must be positive (total %d, per connection %d)", p.MaxBytesTotal, p.MaxBytesPerConnection)
	}
	for _, e := range p.Endpoints {
		switch e.Protocol {
		case ProtocolTCP, ProtocolHTTP, ProtocolHTTPS:
		case ProtocolUDP:
			return actuation.Refusef(actuation.CodeEgressProtocolUnsupported, "egress: endpoint %s: udp is not carried by the node's egress proxy", e)
		default:
			return actuation.Refusef(actuation.CodeInvalidSpec, "egress: endpoint %s: unknown protocol %q", e, e.Protocol)
		}
		if e.Port <= 0 || e.Port > 65535 {
			return actuation.Refusef(actuation.CodeInvalidSpec, "egress: endpoint %s: port out of range", e)
		}
		if !validHost(e.Host) {
			return actuation.Refusef(actuation.CodeInvalidSpec, "egress: endpoint %s: host must be a DNS name or an IP address", e)
		}
	}
	return nil
}

func validHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if h == "" || len(h) > MaxHostLen || strings.HasSuffix(h, ".") {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// New validates p and returns an unattached proxy.
func New(p Policy, o Options) (*Proxy, error) {
	if err := ValidatePolicy(p); err != nil {
		return nil, err
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.Dial == nil {
		d := &net.Dialer{Timeout: o.DialTimeout}
		o.Dial = d.DialContext
	}
	px := &Proxy{policy: p, opts: o, hosts: map[string]netip.Addr{}, allowed: map[Endpoint]bool{}, conns: map[net.Conn]struct{}{}}
	for _, e := range p.Endpoints {
		e.Host = strings.ToLower(e.Host)
		px.allowed[e] = true
		if _, err := netip.ParseAddr(e.Host); err == nil {
			continue // an address literal: reachable through the proxy only
		}
		if _, ok := px.hosts[e.Host]; !ok {
			px.hosts[e.Host] = netip.MustParseAddr(forwardPrefix + strconv.Itoa(len(px.hosts)+1))
		}
	}
	px.ctx, px.cancel = context.WithCancel(context.Background())
	return px, nil
}

// Env is the proxy environment for the program.
func (px *Proxy) Env() []string {
	u := "http://" + ProxyAddr
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "ALL_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u, "all_proxy=" + u}
}

// ForwardAddr returns the address inside the sandbox at which the declared
// host name is forwarded (and which the resolver answers), if any.
func (px *Proxy) ForwardAddr(host string) (netip.Addr, bool) {
	a, ok := px.hosts[strings.ToLower(host)]
	return a, ok
}

// Attach creates the proxy's listeners inside the network namespace of pid
// (the sandbox helper, before its program runs) and starts serving them.
func (px *Proxy) Attach(pid int) error {
	type fwd struct {
		addr string
		host string
		port int
	}
	var fwds []fwd
	for e := range px.allowed {
		if a, ok := px.hosts[e.Host]; ok {
			fwds = append(fwds, fwd{addr: net.JoinHostPort(a.String(), strconv.Itoa(e.Port)), host: e.Host, port: e.Port})
		}
	}
	var (
		proxyL net.Listener
		dnsC   net.PacketConn
		fwdL   = map[net.Listener]fwd{}
	)
	err := inNetns(pid, func() error {
		if err := loopbackUp(); err != nil {
			return err
		}
		var err error
		if proxyL, err = net.Listen("tcp4", ProxyAddr); err != nil {
			return err
		}
		if dnsC, err = net.ListenPacket("udp4", DNSAddr); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, f := range fwds {
			if seen[f.addr] {
				continue
			}
			seen[f.addr] = true
			l, err := net.Listen("tcp4", f.addr)
			if err != nil {
				return err
			}
			fwdL[l] = f
		}
		return nil
	})
	closeAll := func() {
		if proxyL != nil {
			_ = proxyL.Close()
		}
		if dnsC != nil {
			_ = dnsC.Close()
		}
		for l := range fwdL {
			_ = l.Close()
		}
	}
	if err != nil {
		closeAll()
		return actuation.Refusef(actuation.CodeSandboxSetupFailed, "egress: attach to the network namespace of pid %d: %v", pid, err)
	}
	px.mu.Lock()
	if px.closed {
		px.mu.Unlock()
		closeAll()
		return actuation.Refusef(actuation.CodeInterrupted, "egress: proxy closed")
	}
	px.listeners = append(px.listeners, proxyL, dnsC)
	for l := range fwdL {
		px.listeners = append(px.listeners, l)
	}
	px.wg.Add(2 + len(fwdL))
	px.mu.Unlock()
	go px.acceptLoop(proxyL, func(c net.Conn) { px.serveProxy(c) })
	go px.serveDNS(dnsC)
	for l, f := range fwdL {
		go px.acceptLoop(l, func(c net.Conn) { px.serveForward(c, f.host, f.port) })
	}
	return nil
}

// Close stops the listeners, cuts open connections, waits for every relay
// and returns the transcript. It is idempotent.
func (px *Proxy) Close() Transcript {
	px.mu.Lock()
	if !px.closed {
		px.closed = true
		px.cancel()
		for _, l := range px.listeners {
			_ = l.Close()
		}
		for c := range px.conns {
			_ = c.Close()
		}
	}
	px.mu.Unlock()
	px.wg.Wait()
	px.mu.Lock()
	defer px.mu.Unlock()
	tr := px.tr
	tr.Connections = append([]Connection(nil), px.tr.Connections...)
	tr.DNS = append([]DNSQuestion(nil), px.tr.DNS...)
	tr.BytesTotal = px.total.Load()
	return tr
}

// track registers a live connection; false when the proxy is closed.
func (px *Proxy) track(c net.Conn) bool {
	px.mu.Lock()
	defer px.mu.Unlock()
	if px.closed {
		return false
	}
	px.conns[c] = struct{}{}
	return true
}

func (px *Proxy) untrack(c net.Conn) {
	px.mu.Lock()
	delete(px.conns, c)
	px.mu.Unlock()
}

func (px *Proxy) record(c Connection) {
	px.mu.Lock()
	defer px.mu.Unlock()
	if c.Code != "" && px.tr.Code == "" {
		px.tr.Code = c.Code
	}
	if len(px.tr.Connections) >= MaxTranscript {
		px.tr.Dropped++
		return
	}
	px.tr.Connections = append(px.tr.Connections, c)
}

func (px *Proxy) recordDNS(q DNSQuestion) {
	px.mu.Lock()
	defer px.mu.Unlock()
	if !q.Allowed && px.tr.Code == "" {
		px.tr.Code = string(actuation.CodeEgressDNSNameForbidden)
	}
	if len(px.tr.DNS) >= MaxDNSTranscript {
		px.tr.Dropped++
		return
	}
	px.tr.DNS = append(px.tr.DNS, q)
}

func (px *Proxy) acceptLoop(l net.Listener, serve func(net.Conn)) {
	defer px.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		px.mu.Lock()
		if px.closed {
			px.mu.Unlock()
			_ = c.Close()
			return
		}
		if px.active >= MaxConnections {
			px.mu.Unlock()
			_ = c.Close()
			px.record(Connection{Via: "accept", Outcome: OutcomeRefused, Code: string(actuation.CodeEgressConnectionCapReached)})
			continue
		}
		px.active++
		px.wg.Add(1)
		px.mu.Unlock()
		go func() {
			defer func() {
				px.mu.Lock()
				px.active--
				px.mu.Unlock()
				px.wg.Done()
			}()
			if !px.track(c) {
				_ = c.Close()
				return
			}
			defer px.untrack(c)
			defer func() { _ = c.Close() }()
			serve(c)
		}()
	}
}

// lookup returns the declared endpoint for (host, port), if any.
func (px *Proxy) lookup(host string, port int) (Endpoint, bool) {
	host = strings.ToLower(host)
	for _, p := range []Protocol{ProtocolHTTPS, ProtocolHTTP, ProtocolTCP} {
		e := Endpoint{Host: host, Port: port, Protocol: p}
		if px.allowed[e] {
			return e, true
		}
	}
	return Endpoint{Host: host, Port: port}, false
}

// serveForward relays a connection accepted at a forward address.
func (px *Proxy) serveForward(c net.Conn, host string, port int) {
	start := time.Now()
	e, ok := px.lookup(host, port)
	rec := Connection{Host: host, Port: port, Protocol: e.Protocol, Via: "forward"}
	if !ok { // cannot happen: forwards exist only for declared endpoints
		rec.Outcome, rec.Code = OutcomeRefused, string(actuation.CodeEgressEndpointForbidden)
		px.record(rec)
		return
	}
	br := bufio.NewReaderSize(c, 4096)
	if code := checkProtocol(c, br, e.Protocol); code != "" {
		px.end(c, "", rec, OutcomeRefused, code, start)
		return
	}
	up, err := px.dial(e)
	if err != nil {
		px.end(c, "", rec, OutcomeFailed, string(actuation.CodeEgressDialFailed), start)
		return
	}
	px.relay(&rec, start, c, br, up)
}

// Proxy answers that end a client's connection: no body, the connection closed.
const (
	respBadRequest = "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
	respForbidden  = "HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\nX-Workbench-Refusal: " + string(actuation.CodeEgressEndpointForbidden) + "\r\n\r\n"
	respBadGateway = "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
)

// end answers the client with resp (none when empty) and records rec as ended with outcome
// and code.
func (px *Proxy) end(c net.Conn, resp string, rec Connection, outcome, code string, start time.Time) {
	if resp != "" {
		_, _ = io.WriteString(c, resp)
	}
	rec.Outcome, rec.Code, rec.Duration = outcome, code, time.Since(start)
	px.record(rec)
}

// admitDial decides a proxy request to rec's host and port (ok: the address parsed): it is
// refused with 403 unless that is a declared endpoint (of protocol want, when want is not
// empty), and ends with 502 when the dial fails; otherwise rec gets the endpoint's protocol
// and the upstream connection is returned. A nil connection means c has been answered and
// the connection recorded.
func (px *Proxy) admitDial(c net.Conn, rec *Connection, ok bool, want Protocol, start time.Time) (Endpoint, net.Conn) {
	e, allowed := px.lookup(rec.Host, rec.Port)
	if !ok || !allowed || (want != "" && e.Protocol != want) {
		px.end(c, respForbidden, *rec, OutcomeRefused, string(actuation.CodeEgressEndpointForbidden), start)
		return e, nil
	}
	rec.Protocol = e.Protocol
	up, err := px.dial(e)
	if err != nil {
		px.end(c, respBadGateway, *rec, OutcomeFailed, string(actuation.CodeEgressDialFailed), start)
		return e, nil
	}
	return e, up
}

// serveProxy serves one client of the HTTP proxy: CONNECT or one
// absolute-form request.
func (px *Proxy) serveProxy(c net.Conn) {
	start := time.Now()
	lr := &headerLimit{r: c, left: maxRequestHeader}
	br := bufio.NewReaderSize(lr, 4096)
	_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
	req, err := http.ReadRequest(br)
	_ = c.SetReadDeadline(time.Time{})
	lr.lift()
	if err != nil {
		px.end(c, respBadRequest, Connection{Via: "connect"}, OutcomeRefused, string(actuation.CodeEgressProtocolMismatch), start)
		return
	}
	if req.Method == http.MethodConnect {
		host, port, ok := splitHostPort(req.Host)
		rec := Connection{Host: host, Port: port, Via: "connect"}
		e, up := px.admitDial(c, &rec, ok, "", start)
		if up == nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			_ = up.Close()
			rec.Outcome, rec.Duration = OutcomeFailed, time.Since(start)
			px.record(rec)
			return
		}
		// The tunnel's bytes start after the request; the request header
		// itself is not counted. Bytes already buffered stay in br.
		if code := checkProtocol(c, br, e.Protocol); code != "" {
			_ = up.Close()
			px.end(c, "", rec, OutcomeRefused, code, start)
			return
		}
		px.relay(&rec, start, c, br, up)
		return
	}
	// Absolute-form request through the proxy: only to http endpoints.
	rec := Connection{Via: "http"}
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		px.end(c, respBadRequest, rec, OutcomeRefused, string(actuation.CodeEgressProtocolMismatch), start)
		return
	}
	hp := req.URL.Host
	if req.URL.Port() == "" {
		hp = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	host, port, ok := splitHostPort(hp)
	rec.Host, rec.Port = host, port
	_, up := px.admitDial(c, &rec, ok, ProtocolHTTP, start)
	if up == nil {
		return
	}
	// One request per connection: the relay carries it and the response.
	req.RequestURI = ""
	req.Close = true
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(req.Write(pw)) }()
	defer func() { _ = pr.Close() }()
	px.relay(&rec, start, c, pr, up)
}

// headerLimit bounds what a proxy request's header may read from the client
// (the whole header block must fit); lift removes the bound afterwards.
type headerLimit struct {
	r    io.Reader
	left int64 // < 0: unlimited
}

func (l *headerLimit) Read(p []byte) (int, error) {
	if l.left == 0 {
		return 0, errors.New("egress: proxy request header too large")
	}
	if l.left > 0 && int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	if l.left > 0 {
		l.left -= int64(n)
	}
	return n, err
}

func (l *headerLimit) lift() { l.left = -1 }

func splitHostPort(hp string) (string, int, bool) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		return h, 0, false
	}
	return h, n, true
}

// checkProtocol looks at the client's first bytes: a TLS handshake record for
// https, an HTTP request line for http; tcp is not inspected.
func checkProtocol(c net.Conn, br *bufio.Reader, p Protocol) string {
	if p == ProtocolTCP {
		return ""
	}
	_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	switch p {
	case ProtocolHTTPS:
		b, err := br.Peek(3)
		// TLS record: handshake (22), major version 3.
		if err != nil || b[0] != 22 || b[1] != 3 {
			return string(actuation.CodeEgressProtocolMismatch)
		}
	case ProtocolHTTP:
		b, err := br.Peek(8)
		if err != nil && len(b) == 0 {
			return string(actuation.CodeEgressProtocolMismatch)
		}
		sp := strings.IndexByte(string(b), ' ')
		if sp < 3 {
			return string(actuation.CodeEgressProtocolMismatch)
		}
		for _, ch := range b[:sp] {
			if ch < 'A' || ch > 'Z' {
				return string(actuation.CodeEgressProtocolMismatch)
			}
		}
	}
	return ""
}

func (px *Proxy) dial(e Endpoint) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(px.ctx, px.opts.DialTimeout)
	defer cancel()
	up, err := px.opts.Dial(ctx, "tcp", net.JoinHostPort(e.Host, strconv.Itoa(e.Port)))
	if err != nil {
		return nil, fmt.Errorf("egress: dial %s: %w", e, err)
	}
	if !px.track(up) {
		_ = up.Close()
		return nil, errors.New("egress: proxy closed")
	}
	return up, nil
}

// relay copies both ways under the caps and records the connection.
func (px *Proxy) relay(rec *Connection, start time.Time, c net.Conn, fromClient io.Reader, up net.Conn) {
	defer px.untrack(up)
	defer func() { _ = up.Close() }()
	var (
		budgetMu sync.Mutex
		connLeft = px.policy.MaxBytesPerConnection
		cutOnce  sync.Once
		cutCode  string
	)
	cut := func(code string) {
		cutOnce.Do(func() {
			cutCode = code
			_ = c.Close()
			_ = up.Close()
		})
	}
	// reserve takes up to n bytes from the connection's and the proxy's
	// budgets; a non-empty code names the cap that granted less than n.
	reserve := func(n int64) (int64, string) {
		budgetMu.Lock()
		defer budgetMu.Unlock()
		g, code := n, ""
		if connLeft < g {
			g, code = connLeft, string(actuation.CodeEgressByteCapReached)
		}
		for {
			t := px.total.Load()
			tg, tcode := g, code
			if room := px.policy.MaxBytesTotal - t; room < tg {
				tg, tcode = max(room, 0), string(actuation.CodeEgressTotalByteCapReached)
			}
			if tg == 0 {
				return 0, tcode
			}
			if px.total.CompareAndSwap(t, t+tg) {
				connLeft -= tg
				return tg, tcode
			}
		}
	}
	var wg sync.WaitGroup
	var out, in atomic.Int64
	var failed atomic.Bool
	pump := func(dst net.Conn, src io.Reader, counter *atomic.Int64) {
		defer wg.Done()
		buf := make([]byte, copyChunk)
		for {
			n, rerr := src.Read(buf)
			if n > 0 {
				g, code := reserve(int64(n))
				if g > 0 {
					w, werr := dst.Write(buf[:g])
					counter.Add(int64(w))
					if werr != nil {
						failed.Store(true)
						cut("")
						return
					}
				}
				if code != "" {
					cut(code)
					return
				}
			}
			if rerr != nil {
				if !errors.Is(rerr, io.EOF) {
					failed.Store(true)
					cut("")
					return
				}
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				} else {
					_ = dst.Close()
				}
				return
			}
		}
	}
	wg.Add(2)
	go pump(up, fromClient, &out)
	go pump(c, up, &in)
	wg.Wait()
	rec.BytesOut, rec.BytesIn, rec.Duration = out.Load(), in.Load(), time.Since(start)
	px.mu.Lock()
	closing := px.closed
	px.mu.Unlock()
	switch {
	case cutCode != "":
		rec.Outcome, rec.Code = OutcomeCut, cutCode
	case closing && failed.Load():
		rec.Outcome = OutcomeClosed
	default:
		// A reset or a write to a side that has gone is how TCP (and TLS
		// without close_notify) ends as often as not: the relay did its job.
		rec.Outcome = OutcomeOK
	}
	px.record(*rec)
}

package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	protocol "sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/webhooks"
)

// The aggregated server's own tests: a real kube-apiserver (envtest) holds the objects the
// Forwarder reads, and a real mutual-TLS HTTP server stands where a node data plane is.
var env *envtest.Env

// The manager runs the webhooks only (no controller): objects are admitted as in
// production.
func TestMain(m *testing.M) {
	envtest.Main(m, "apiserver", envtest.Options{Setup: webhooks.SetupWithManager}, &env)
}

// node is a TLS server speaking the data-plane protocol's side of one request: it records
// what the Forwarder sent and answers with a protocol refusal body.
type node struct {
	srv  *httptest.Server
	ca   *envtest.CA
	got  chan *http.Request
	peer chan string
}

func startNode(t *testing.T, clientCA *envtest.CA) *node {
	t.Helper()
	ca, err := envtest.NewCA("test node CA")
	must(t, err)
	certPEM, keyPEM, err := ca.Issue("node", "127.0.0.1")
	must(t, err)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	must(t, err)
	n := &node{ca: ca, got: make(chan *http.Request, 1), peer: make(chan string, 1)}
	n.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) > 0 {
			n.peer <- r.TLS.PeerCertificates[0].Subject.CommonName
		} else {
			n.peer <- ""
		}
		n.got <- r.Clone(context.Background())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_ = json.NewEncoder(w).Encode(protocol.StatusFor(http.StatusTooManyRequests, string(actuation.CodeQueueFull), "the input queue is full"))
	}))
	n.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: poolOf(clientCA)}
	n.srv.StartTLS()
	t.Cleanup(n.srv.Close)
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fixture creates a namespace, a WorkbenchNode publishing endpoint/caPEM (when endpoint is
// set) and an Artifact "a" bound to it (when bind), and returns the namespace.
func fixture(t *testing.T, nodeName, endpoint string, caPEM []byte, bind bool) (ns string) {
	t.Helper()
	ctx := context.Background()
	ns = env.Namespace(t, "apiserver-")
	wn := &wbv1.WorkbenchNode{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	must(t, env.Client.Create(ctx, wn))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), wn) })
	if endpoint != "" {
		wn.Status.DataPlane = &wbv1.DataPlane{Endpoint: endpoint, CABundle: string(caPEM)}
		must(t, env.Client.Status().Update(ctx, wn))
	}
	labels := map[string]string{}
	if bind {
		labels[wbv1.NodeLabel] = nodeName
	}
	must(t, env.Client.Create(ctx, &wbv1.Artifact{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns, Labels: labels},
		Spec:       wbv1.ArtifactSpec{EnvironmentRef: "e", Source: "upload"},
	}))
	return ns
}

func newForwarder(t *testing.T) (*Forwarder, *envtest.CA) {
	return forwarderWith(t, env.Client)
}

// forwarderWith is a Forwarder over c whose client certificate (common name
// workbench-apiserver) is issued by a fresh CA, returned for the node side to trust.
func forwarderWith(t *testing.T, c client.Client) (*Forwarder, *envtest.CA) {
	t.Helper()
	ca, err := envtest.NewCA("test apiserver client CA")
	must(t, err)
	certPEM, keyPEM, err := ca.Issue("workbench-apiserver")
	must(t, err)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	must(t, err)
	fwd, err := NewForwarder(c, cert)
	must(t, err)
	return fwd, ca
}

func callerContext(ns string) context.Context {
	ctx := genericapirequest.WithNamespace(context.Background(), ns)
	return genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "alice", UID: "u-1", Groups: []string{"devs", "system:authenticated"}, Extra: map[string][]string{"scopes.example/x": {"y"}}})
}

// serve runs h behind a real HTTP server and returns the status and the decoded Status body.
func serve(t *testing.T, h http.Handler, method, target string, hdr http.Header) (int, *metav1.Status) {
	t.Helper()
	front := httptest.NewServer(h)
	defer front.Close()
	req, err := http.NewRequest(method, front.URL+target, nil)
	must(t, err)
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := front.Client().Do(req)
	must(t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	must(t, err)
	var st metav1.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("answer %d is not a Status: %v: %s", resp.StatusCode, err, raw)
	}
	return resp.StatusCode, &st
}

// TestForwardRoundTrip: a request for artifacts/a/download reaches the bound node's data
// plane on the protocol's path, over mutual TLS with the server's own certificate, carrying
// the caller's identity in the protocol's headers (any identity header or bearer token the
// client sent is dropped), and the node's refusal comes back with its status and code.
func TestForwardRoundTrip(t *testing.T) {
	fwd, clientCA := newForwarder(t)
	n := startNode(t, clientCA)
	caPEM := n.ca.CertPEM
	ns := fixture(t, "node-rt", n.srv.URL, caPEM, true)
	h, err := fwd.Handler(callerContext(ns), "artifacts", "a", "download")
	must(t, err)
	code, st := serve(t, h, http.MethodGet, "/ignored?x=1", http.Header{
		"Authorization": {"Bearer stolen"}, protocol.HeaderRemoteUser: {"mallory"}, protocol.HeaderRemoteGroup: {"system:masters"},
		protocol.HeaderRemoteExtraPrefix + "Evil": {"1"},
	})
	if code != http.StatusTooManyRequests || protocol.CodeOfStatus(st) != string(actuation.CodeQueueFull) {
		t.Fatalf("forwarded refusal = %d %q (%s), want 429 %s", code, protocol.CodeOfStatus(st), st.Message, actuation.CodeQueueFull)
	}
	r := <-n.got
	if cn := <-n.peer; cn != "workbench-apiserver" {
		t.Errorf("the node saw client certificate %q, want workbench-apiserver", cn)
	}
	if want := protocol.V2Path(ns, "artifacts", "a", "download"); r.URL.Path != want || r.URL.RawQuery != "x=1" {
		t.Errorf("the node saw %s?%s, want %s?x=1", r.URL.Path, r.URL.RawQuery, want)
	}
	if got := r.Header.Get(protocol.HeaderRemoteUser); got != "alice" {
		t.Errorf("forwarded user = %q, want alice", got)
	}
	if got := r.Header.Get(protocol.HeaderRemoteUID); got != "u-1" {
		t.Errorf("forwarded uid = %q, want u-1", got)
	}
	if got := strings.Join(r.Header.Values(protocol.HeaderRemoteGroup), ","); got != "devs,system:authenticated" {
		t.Errorf("forwarded groups = %q, want devs,system:authenticated", got)
	}
	if got := r.Header.Get(protocol.HeaderRemoteExtraPrefix + "Evil"); got != "" {
		t.Errorf("a client-sent extra header reached the node: %q", got)
	}
	if got := r.Header.Get(protocol.HeaderRemoteExtraPrefix + "Scopes.example%2Fx"); got != "y" {
		t.Errorf("forwarded extra = %v, want scopes.example/x=y", r.Header)
	}
	if got := r.Header.Get("Authorization"); got != "" {
		t.Errorf("the caller's Authorization header reached the node: %q", got)
	}
}

// TestRefusalMapping: what the Forwarder cannot forward is refused with a metav1.Status
// carrying the stable code (never a bare error).
func TestRefusalMapping(t *testing.T) {
	fwd, _ := newForwarder(t)
	statusOf := func(err error) (int32, string) {
		var se apierrors.APIStatus
		if !errors.As(err, &se) {
			return 0, fmt.Sprintf("error %v (%T) carries no Status", err, err)
		}
		st := se.Status()
		return st.Code, protocol.CodeOfStatus(&st)
	}
	t.Run("missing object", func(t *testing.T) {
		ns := env.Namespace(t, "apiserver-")
		_, err := fwd.Handler(callerContext(ns), "artifacts", "nope", "download")
		if code, c := statusOf(err); code != http.StatusNotFound || c != string(actuation.CodeNotFound) {
			t.Fatalf("got %d %q, want 404 %s", code, c, actuation.CodeNotFound)
		}
	})
	t.Run("not bound", func(t *testing.T) {
		ns := fixture(t, "node-unbound", "", nil, false)
		_, err := fwd.Handler(callerContext(ns), "artifacts", "a", "download")
		if code, c := statusOf(err); code != http.StatusServiceUnavailable || c != string(actuation.CodeNodeUnreachable) {
			t.Fatalf("got %d %q, want 503 %s", code, c, actuation.CodeNodeUnreachable)
		}
	})
	t.Run("no data plane published", func(t *testing.T) {
		ns := fixture(t, "node-nodp", "", nil, true)
		_, err := fwd.Handler(callerContext(ns), "artifacts", "a", "download")
		if code, c := statusOf(err); code != http.StatusServiceUnavailable || c != string(actuation.CodeNodeUnreachable) {
			t.Fatalf("got %d %q, want 503 %s", code, c, actuation.CodeNodeUnreachable)
		}
	})
	t.Run("node down", func(t *testing.T) {
		_, clientCA := newForwarder(t)
		n := startNode(t, clientCA)
		url, caPEM := n.srv.URL, n.ca.CertPEM
		n.srv.Close()
		ns := fixture(t, "node-down", url, caPEM, true)
		h, err := fwd.Handler(callerContext(ns), "artifacts", "a", "download")
		must(t, err)
		code, st := serve(t, h, http.MethodGet, "/", nil)
		if code != http.StatusServiceUnavailable || protocol.CodeOfStatus(st) != string(actuation.CodeNodeUnreachable) {
			t.Fatalf("got %d %q (%s), want 503 %s", code, protocol.CodeOfStatus(st), st.Message, actuation.CodeNodeUnreachable)
		}
	})
	t.Run("no user", func(t *testing.T) {
		_, err := fwd.Handler(genericapirequest.WithNamespace(context.Background(), "x"), "artifacts", "a", "download")
		if code, _ := statusOf(err); code != http.StatusUnauthorized {
			t.Fatalf("got %d, want 401", code)
		}
	})
}

func poolOf(ca *envtest.CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

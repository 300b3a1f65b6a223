package apiserver

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	dpprotocol "sensorium.dev/workbench/internal/dataplane/protocol/v2"
)

// MaxTransports bounds the cached per-node transports (one per data plane endpoint and CA).
const MaxTransports = 1024

// Forwarder finds an object's node and forwards requests to that node's data plane.
type Forwarder struct {
	c    client.Reader
	cert tls.Certificate

	mu         sync.Mutex
	transports map[string]*http.Transport
}

// NewForwarder reads objects through c and presents cert (this server's own client
// certificate) to node data planes.
func NewForwarder(c client.Reader, cert tls.Certificate) (*Forwarder, error) {
	if c == nil {
		return nil, errors.New("forwarder: nil client")
	}
	if len(cert.Certificate) == 0 {
		return nil, errors.New("forwarder: a client certificate for the node data planes is required")
	}
	return &Forwarder{c: c, cert: cert, transports: map[string]*http.Transport{}}, nil
}

// statusError is a refusal as the apiserver renders it (metav1.Status with the code).
func statusError[C ~string](status int, code C, msg string) error {
	return &apierrors.StatusError{ErrStatus: *dpprotocol.StatusFor(status, string(code), msg)}
}

// crdKinds maps a served resource to the Workbench kind that owns the object.
var crdKinds = map[string]string{
	"terminalsessions": "TerminalSession",
	"terminalcommands": "TerminalCommand",
	"environments":     "Environment",
	"artifacts":        "Artifact",
	"terminalviews":    "TerminalView",
}

// metadata reads the metadata of the Workbench object behind resource ns/name.
func (f *Forwarder) metadata(ctx context.Context, resource, ns, name string) (*metav1.PartialObjectMetadata, error) {
	kind, ok := crdKinds[resource]
	if !ok {
		return nil, apierrors.NewNotFound(GroupVersion.WithResource(resource).GroupResource(), name)
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(wbv1.GroupVersion.WithKind(kind))
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, statusError(http.StatusNotFound, string(actuation.CodeNotFound), fmt.Sprintf("%s %s/%s not found", strings.ToLower(kind), ns, name))
		}
		return nil, fmt.Errorf("reading %s %s/%s: %w", kind, ns, name, err)
	}
	return obj, nil
}

// target returns the data plane endpoint and CA of the node bound to resource ns/name.
func (f *Forwarder) target(ctx context.Context, resource, ns, name string) (*wbv1.DataPlane, error) {
	obj, err := f.metadata(ctx, resource, ns, name)
	if err != nil {
		return nil, err
	}
	kind := crdKinds[resource]
	node := obj.Labels[wbv1.NodeLabel]
	if node == "" {
		return nil, &notBoundError{statusError(http.StatusServiceUnavailable, actuation.CodeNodeUnreachable,
			fmt.Sprintf("%s %s/%s is not bound to a node yet", strings.ToLower(kind), ns, name))}
	}
	var wn wbv1.WorkbenchNode
	if err := f.c.Get(ctx, types.NamespacedName{Name: node}, &wn); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, statusError(http.StatusServiceUnavailable, actuation.CodeNodeUnreachable, "node "+node+" has no WorkbenchNode")
		}
		return nil, fmt.Errorf("reading WorkbenchNode %s: %w", node, err)
	}
	dp := wn.Status.DataPlane
	if dp == nil || dp.Endpoint == "" || dp.CABundle == "" {
		return nil, statusError(http.StatusServiceUnavailable, actuation.CodeNodeUnreachable, "node "+node+" publishes no data plane")
	}
	return dp, nil
}

// transport returns the cached mutual-TLS transport for a node's data plane.
func (f *Forwarder) transport(dp *wbv1.DataPlane) (*http.Transport, error) {
	sum := sha256.Sum256([]byte(dp.Endpoint + "\x00" + dp.CABundle))
	key := string(sum[:])
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.transports[key]; t != nil {
		return t, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(dp.CABundle)) {
		return nil, statusError(http.StatusServiceUnavailable, actuation.CodeNodeUnreachable, "the node's published CA bundle holds no certificate")
	}
	if len(f.transports) >= MaxTransports {
		for k, t := range f.transports { // evict one: nodes come and go
			t.CloseIdleConnections()
			delete(f.transports, k)
			break
		}
	}
	t := &http.Transport{
		TLSClientConfig: &tls.Config{
			RootCAs: pool, Certificates: []tls.Certificate{f.cert}, MinVersion: tls.VersionTLS12,
		},
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: time.Minute,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     false,
	}
	f.transports[key] = t
	return t, nil
}

// Handler returns the handler forwarding one request for resource/name/sub to its node.
func (f *Forwarder) Handler(ctx context.Context, resource, name, sub string) (http.Handler, error) {
	ns, ok := genericapirequest.NamespaceFrom(ctx)
	if !ok || ns == "" {
		return nil, apierrors.NewBadRequest("a namespace is required")
	}
	user, ok := genericapirequest.UserFrom(ctx)
	if !ok || user.GetName() == "" {
		return nil, apierrors.NewUnauthorized("no authenticated user")
	}
	dp, err := f.target(ctx, resource, ns, name)
	var nb *notBoundError
	if resource == "terminalcommands" && sub == "output" && errors.As(err, &nb) {
		return f.unboundOutput(ns, name, user), nil
	}
	if err != nil {
		return nil, err
	}
	base, err := url.Parse(dp.Endpoint)
	if err != nil || base.Scheme != "https" || base.Host == "" {
		return nil, statusError(http.StatusServiceUnavailable, actuation.CodeNodeUnreachable, "the node's data plane endpoint "+dp.Endpoint+" is not an https URL")
	}
	t, err := f.transport(dp)
	if err != nil {
		return nil, err
	}
	path := dpprotocol.V2Path(url.PathEscape(ns), resource, url.PathEscape(name), sub)
	logger := ctrl.LoggerFrom(ctx)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.URL.Path, pr.Out.URL.RawPath = base.Scheme, base.Host, path, ""
			pr.Out.Host = base.Host
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Impersonate-User")
			dpprotocol.SetForwardedUser(pr.Out.Header, user.GetName(), user.GetUID(), user.GetGroups(), user.GetExtra())
		},
		Transport:     t,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			logger.Error(err, "Forwarding to the node data plane", "endpoint", dp.Endpoint, "path", path)
			st := dpprotocol.StatusFor(http.StatusServiceUnavailable, string(actuation.CodeNodeUnreachable),
				"the node's data plane did not answer")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			raw, _ := json.Marshal(st)
			_, _ = w.Write(raw)
		},
	}
	return rp, nil
}

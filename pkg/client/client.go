// Package client is the one Go client of Sensorium Workbench: typed helpers over the
// workbench.sensorium.dev CRDs and the aggregated subresources of
// subresources.workbench.sensorium.dev (docs/api-subresources.md). The kubectl-workbench
// CLI and the MCP servers (stdio and streamable HTTP) are thin layers over it; neither
// repeats its logic.
//
// Every call runs as the identity of the rest.Config it was built from, so RBAC, the
// admission webhooks and the API server audit log see the caller, never this package.
// Refusals come back as *Error carrying the stable code of internal/actuation.
package client

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// SubresourcesGroupVersion is the aggregated API group served by workbench-apiserver.
var SubresourcesGroupVersion = schema.GroupVersion{Group: "subresources.workbench.sensorium.dev", Version: "v1alpha1"}

// Scheme holds the core Kubernetes types and the workbench kinds.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(wbv1.AddToScheme(s))
	return s
}()

// Client talks to one namespace of one cluster as one identity.
type Client struct {
	// Config is the caller's rest.Config (never widened by this package).
	Config *rest.Config
	// Namespace is where objects are created and looked up.
	Namespace string
	// Kube is a controller-runtime client with watch support for the CRDs.
	Kube ctrlclient.WithWatch
	// Sub is a REST client for the aggregated subresources (streams use it with AbsPath).
	Sub rest.Interface
	// streamConfig is Config without a client-side timeout, for long-lived streams.
	stream rest.Interface
	// PlainFollow follows command output over plain HTTP (chunked) instead of the
	// WebSocket stream; kube-apiserver cuts a plain follow at its request timeout and
	// CommandOutput resumes it (docs/api-subresources.md, "Long-lived streams").
	PlainFollow bool
	// OnOutputResume, when set, is called each time CommandOutput opens the output again
	// before the command has ended (a cut, a bounded wait), with the byte offset.
	OnOutputResume func(offset int64)
}

// New builds a Client for namespace from cfg.
func New(cfg *rest.Config, namespace string) (*Client, error) {
	if namespace == "" {
		namespace = "default"
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "kubectl-workbench"
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating client for %s: %w", cfg.Host, err)
	}
	mapper, err := newMapper(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("creating client for %s: %w", cfg.Host, err)
	}
	kube, err := ctrlclient.NewWithWatch(cfg, ctrlclient.Options{Scheme: Scheme, HTTPClient: hc, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("creating client for %s: %w", cfg.Host, err)
	}
	sub, err := subClient(cfg, 0)
	if err != nil {
		return nil, err
	}
	stream, err := subClient(cfg, -1)
	if err != nil {
		return nil, err
	}
	return &Client{Config: cfg, Namespace: namespace, Kube: kube, Sub: sub, stream: stream}, nil
}

// subClient is a REST client for the aggregated group. timeout 0 keeps cfg's timeout;
// a negative timeout removes it (streams end when their command ends or ctx ends).
func subClient(cfg *rest.Config, timeout time.Duration) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &SubresourcesGroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: clientgoscheme.Codecs}
	if timeout < 0 {
		c.Timeout = 0
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("creating client for %s: %w", SubresourcesGroupVersion, err)
	}
	return rc, nil
}

// ForToken is cfg with its credentials replaced by a bearer token, and nothing else of the
// holder's identity: the MCP HTTP server builds one per request from the caller's token.
func ForToken(cfg *rest.Config, token string) *rest.Config {
	anon := rest.AnonymousClientConfig(cfg)
	anon.BearerToken = token
	return anon
}

// basePath is the aggregated API path of this client's namespace.
func (c *Client) basePath() string {
	return "/apis/" + SubresourcesGroupVersion.Group + "/" + SubresourcesGroupVersion.Version + "/namespaces/" + c.Namespace
}

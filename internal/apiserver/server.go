package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	basecompatibility "k8s.io/component-base/compatibility"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options configure workbench-apiserver.
type Options struct {
	SecureServing  *genericoptions.SecureServingOptionsWithLoopback
	Authentication *genericoptions.DelegatingAuthenticationOptions
	Authorization  *genericoptions.DelegatingAuthorizationOptions
	// Kubeconfig reaches kube-apiserver to read objects and WorkbenchNodes ("" = in-cluster).
	Kubeconfig string
	// NodeClientCertFile and NodeClientKeyFile are this server's own client certificate
	// for the node data planes (the node agents trust its CA and name).
	NodeClientCertFile, NodeClientKeyFile string
	// AlternateDNS and AlternateIPs go into a self-signed serving certificate when no
	// certificate is given (development only).
	AlternateDNS []string
}

// NewOptions returns the defaults: port 8443, delegated authentication and authorization.
func NewOptions() *Options {
	o := &Options{
		SecureServing:  genericoptions.NewSecureServingOptions().WithLoopback(),
		Authentication: genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:  genericoptions.NewDelegatingAuthorizationOptions(),
	}
	o.SecureServing.BindPort = 8443
	o.SecureServing.ServerCert.PairName = "workbench-apiserver"
	return o
}

// AddFlags binds the options to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.SecureServing.AddFlags(fs)
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fs)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig reaching kube-apiserver to read Workbench objects and WorkbenchNodes (empty: in-cluster)")
	fs.StringVar(&o.NodeClientCertFile, "node-client-cert-file", o.NodeClientCertFile, "this server's client certificate (PEM) for the node data planes")
	fs.StringVar(&o.NodeClientKeyFile, "node-client-key-file", o.NodeClientKeyFile, "the key of --node-client-cert-file")
	fs.StringSliceVar(&o.AlternateDNS, "self-signed-dns", o.AlternateDNS, "DNS names of a self-signed serving certificate when none is given")
}

// RestConfig returns the configuration reaching kube-apiserver.
func (o *Options) RestConfig() (*rest.Config, error) {
	if o.Kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
}

// LongRunningSubresources are exempt from the request timeout: they stream.
var LongRunningSubresources = sets.NewString("attach", "output", "events", "download", "files", "stream")

// Server is a configured, not yet running workbench-apiserver.
type Server struct {
	generic *genericapiserver.GenericAPIServer
}

// New configures the server from o; restCfg reaches kube-apiserver (objects, WorkbenchNodes).
func New(o *Options, restCfg *rest.Config) (*Server, error) {
	if o.NodeClientCertFile == "" || o.NodeClientKeyFile == "" {
		return nil, errors.New("workbench-apiserver: --node-client-cert-file and --node-client-key-file are required")
	}
	cert, err := tls.LoadX509KeyPair(o.NodeClientCertFile, o.NodeClientKeyFile)
	if err != nil {
		return nil, fmt.Errorf("workbench-apiserver: loading the node client certificate %s: %w", o.NodeClientCertFile, err)
	}
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", o.AlternateDNS, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("workbench-apiserver: self-signed serving certificate: %w", err)
	}
	cfg := genericapiserver.NewRecommendedConfig(Codecs)
	cfg.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString("1.37", "", "")
	if err := o.SecureServing.ApplyTo(&cfg.SecureServing, &cfg.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("workbench-apiserver: serving: %w", err)
	}
	if err := o.Authentication.ApplyTo(&cfg.Authentication, cfg.SecureServing, nil); err != nil {
		return nil, fmt.Errorf("workbench-apiserver: delegated authentication: %w", err)
	}
	if err := o.Authorization.ApplyTo(&cfg.Authorization); err != nil {
		return nil, fmt.Errorf("workbench-apiserver: delegated authorization: %w", err)
	}
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openAPIDefinitions, openapi.NewDefinitionNamer(Scheme))
	cfg.OpenAPIV3Config.Info.Title, cfg.OpenAPIV3Config.Info.Version = "workbench-apiserver", Version
	cfg.LongRunningFunc = genericfilters.BasicLongRunningRequestCheck(sets.NewString("watch", "proxy"), LongRunningSubresources)
	// Nothing here is stored: no admission, no etcd, no OpenAPI of objects.
	c, err := client.NewWithWatch(restCfg, client.Options{Scheme: crdScheme()})
	if err != nil {
		return nil, fmt.Errorf("workbench-apiserver: client: %w", err)
	}
	fwd, err := NewForwarder(c, cert)
	if err != nil {
		return nil, err
	}
	gs, err := cfg.Complete().New("workbench-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("workbench-apiserver: %w", err)
	}
	info := genericapiserver.NewDefaultAPIGroupInfo(GroupName, Scheme, metav1.ParameterCodec, Codecs)
	info.VersionedResourcesStorageMap[Version] = storages(fwd)
	if err := gs.InstallAPIGroup(&info); err != nil {
		return nil, fmt.Errorf("workbench-apiserver: installing %s: %w", GroupVersion, err)
	}
	return &Server{generic: gs}, nil
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	return s.generic.PrepareRun().RunWithContext(ctx)
}

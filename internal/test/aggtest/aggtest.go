// Package aggtest starts workbench-apiserver in-process against an envtest control plane
// started with Options.Aggregation, and registers it with an APIService exactly as
// config/apiserver does (Service + EndpointSlice, since aggregator routing is on and no
// controller fills endpoints).
package aggtest

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sensorium.dev/workbench/internal/apiserver"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
)

// Names of the registration (as in config/apiserver).
const (
	Namespace   = "workbench-system"
	ServiceName = "workbench-apiserver"
	// NodeClientName is the common name of the server's client certificate for node data
	// planes; node agents allow exactly this name.
	NodeClientName = "workbench-apiserver"
)

// Server is a running workbench-apiserver.
type Server struct {
	// Addr is host:port where it serves directly (not through kube-apiserver).
	Addr string
	// ServingCA signs its serving certificate.
	ServingCA *envtest.CA
	// NodeClientCAFile is the CA (PEM file) of its client certificate for node data planes;
	// node agents are configured with it and NodeClientName.
	NodeClientCAFile string
	dir              string
	stop             context.CancelFunc
	done             chan error
}

// HostIP returns a non-loopback IPv4 address of this machine: EndpointSlices refuse loopback
// addresses, and kube-apiserver dials the endpoint directly (aggregator routing).
func HostIP() (net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.To4(), nil
		}
	}
	return nil, errors.New("no non-loopback IPv4 address: kube-apiserver cannot reach an aggregated server through an EndpointSlice")
}

// Kubeconfig writes cfg (a client-certificate admin config) as a kubeconfig file.
func Kubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	return clientcmd.WriteToFile(*kc, path)
}

// Start runs the server and registers its APIService; it returns once the APIService is
// Available.
func Start(ctx context.Context, e *envtest.Env) (*Server, error) {
	if e.Aggregation == nil {
		return nil, errors.New("aggtest: the control plane was started without Options.Aggregation")
	}
	ip, err := HostIP()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "wb-apiserver-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir}
	if s.ServingCA, err = envtest.NewCA("workbench-apiserver-serving-ca"); err != nil {
		return nil, err
	}
	svcDNS := ServiceName + "." + Namespace + ".svc"
	servCert, servKey, err := s.ServingCA.IssueFiles(dir, "serving", svcDNS, svcDNS, ip.String(), "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	nodeCA, err := envtest.NewCA("workbench-apiserver-node-client-ca")
	if err != nil {
		return nil, err
	}
	s.NodeClientCAFile = filepath.Join(dir, "node-client-ca.crt")
	if err := os.WriteFile(s.NodeClientCAFile, nodeCA.CertPEM, 0o600); err != nil {
		return nil, err
	}
	clientCert, clientKey, err := nodeCA.IssueFiles(dir, "node-client", NodeClientName)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := Kubeconfig(e.Config, kubeconfig); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return nil, err
	}
	s.Addr = ln.Addr().String()
	_, portStr, _ := net.SplitHostPort(s.Addr)
	port, _ := strconv.Atoi(portStr)

	o := apiserver.NewOptions()
	o.SecureServing.Listener, o.SecureServing.BindPort = ln, port
	o.SecureServing.ServerCert.CertKey.CertFile, o.SecureServing.ServerCert.CertKey.KeyFile = servCert, servKey
	o.Authentication.RemoteKubeConfigFile, o.Authorization.RemoteKubeConfigFile = kubeconfig, kubeconfig
	o.Kubeconfig, o.NodeClientCertFile, o.NodeClientKeyFile = kubeconfig, clientCert, clientKey
	srv, err := apiserver.New(o, e.Config)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), ctrl.Log.WithName("workbench-apiserver")))
	s.stop, s.done = cancel, make(chan error, 1)
	go func() { s.done <- srv.Run(rctx) }()
	if err := Register(ctx, e.Client, ip.String(), int32(port), s.ServingCA.CertPEM); err != nil {
		s.Stop()
		return nil, err
	}
	if err := WaitAvailable(ctx, e.Client, 60*time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Stop stops the server.
func (s *Server) Stop() {
	if s.stop != nil {
		s.stop()
		select {
		case err := <-s.done:
			if err != nil {
				fmt.Fprintf(os.Stderr, "aggtest: the aggregated API server ended with an error: %v\n", err)
			}
		case <-time.After(30 * time.Second):
			fmt.Fprintln(os.Stderr, "aggtest: the aggregated API server did not stop within 30s")
		}
	}
	_ = os.RemoveAll(s.dir)
}

// APIServiceName is the APIService registering the group version.
const APIServiceName = apiserver.Version + "." + apiserver.GroupName

// Register creates the Namespace, Service, EndpointSlice (ip:port) and APIService.
func Register(ctx context.Context, c client.Client, ip string, port int32, caPEM []byte) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if err := c.Create(ctx, ns); err != nil && !isExists(err) {
		return fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: Namespace}, Spec: corev1.ServiceSpec{
		Type:  corev1.ServiceTypeClusterIP,
		Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP}},
	}}
	if err := c.Create(ctx, svc); err != nil && !isExists(err) {
		return fmt.Errorf("creating service: %w", err)
	}
	ready, name, proto := true, "https", corev1.ProtocolTCP
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: ServiceName, Namespace: Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: ServiceName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	if err := c.Create(ctx, eps); err != nil {
		return fmt.Errorf("creating endpoint slice: %w", err)
	}
	as := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": APIServiceName},
		"spec": map[string]any{
			"group": apiserver.GroupName, "version": apiserver.Version,
			"service":              map[string]any{"namespace": Namespace, "name": ServiceName, "port": int64(443)},
			"caBundle":             base64.StdEncoding.EncodeToString(caPEM),
			"groupPriorityMinimum": int64(100), "versionPriority": int64(15),
		},
	}}
	if err := c.Create(ctx, as); err != nil {
		return fmt.Errorf("creating APIService %s: %w", APIServiceName, err)
	}
	return nil
}

// WaitAvailable waits for the APIService's Available condition.
func WaitAvailable(ctx context.Context, c client.Client, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		as := &unstructured.Unstructured{}
		as.SetAPIVersion("apiregistration.k8s.io/v1")
		as.SetKind("APIService")
		if err := c.Get(ctx, client.ObjectKey{Name: APIServiceName}, as); err == nil {
			conds, _, _ := unstructured.NestedSlice(as.Object, "status", "conditions")
			for _, ci := range conds {
				m, _ := ci.(map[string]any)
				if m["type"] == "Available" {
					if m["status"] == "True" {
						return nil
					}
					last = fmt.Sprintf("%v: %v", m["reason"], m["message"])
				}
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("APIService %s not Available after %s: %s", APIServiceName, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func isExists(err error) bool {
	return err != nil && (client.IgnoreAlreadyExists(err) == nil)
}

// StartWithAgent starts workbench-apiserver for suite (stopped with it) and the suite's
// node agent named node, with caps for 64 sessions (8 per environment) and a data plane that
// accepts forwarded identities only from the server's client certificate; opts adjust the
// agent's configuration.
func StartWithAgent(suite *nodeagenttest.Suite, node string, opts ...func(*agent.Config)) (*Server, error) {
	s, err := Start(suite.Ctx, suite.Env)
	if err != nil {
		return nil, fmt.Errorf("starting workbench-apiserver: %w", err)
	}
	suite.Defer(s.Stop)
	cfg := suite.AgentConfig(node)
	cfg.Caps = agent.Caps{Sessions: 64, SessionsPerEnvironment: 8}
	s.Forwarding(&cfg)
	for _, o := range opts {
		o(&cfg)
	}
	if _, err := suite.StartAgent(cfg, agent.Options{}); err != nil {
		return nil, err
	}
	return s, nil
}

// Forwarding makes an agent's data plane accept forwarded identities only from s's client
// certificate (its CA and name).
func (s *Server) Forwarding(cfg *agent.Config) {
	cfg.DataPlaneForwardingCAFile = s.NodeClientCAFile
	cfg.DataPlaneForwardingNames = []string{NodeClientName}
}

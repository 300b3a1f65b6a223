// Package envtest is the shared bootstrap of the integration suites: a real kube-apiserver
// and etcd (built by hack/build-control-plane.sh from the Go module proxy), the real CRDs
// from config/crd/bases, the real webhook configurations from config/webhook, the RBAC
// roles from config/rbac, and the manager's controllers and webhooks running in-process.
package envtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/webhooks"
)

// Env is a running control plane with the manager attached.
type Env struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	Scheme *kruntime.Scheme
	Root   string
	// Aggregation is set when Options.Aggregation started the front-proxy setup.
	Aggregation *Aggregation
	stop        context.CancelFunc
	done        chan error
}

// Options tune the manager run by the bootstrap.
type Options struct {
	// Setup registers controllers and webhooks; nil starts no manager.
	Setup func(mgr ctrl.Manager) error
	// Aggregation starts kube-apiserver with the front-proxy (requestheader) flags, aggregator
	// routing and an audit log, so aggregated API servers can be registered.
	Aggregation bool
	// RequestTimeout, when set, is kube-apiserver's --request-timeout (default 60 s): the
	// bound of requests it does not consider long-running.
	RequestTimeout time.Duration
	// WebhookTLSOpts tune the webhook server's TLS config, as cmd/manager's do (its
	// default serves HTTP/1.1 only).
	WebhookTLSOpts []func(*tls.Config)
}

// RepoRoot is the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Scheme returns a scheme with the core and workbench types.
func Scheme() *kruntime.Scheme {
	s := kruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(wbv1.AddToScheme(s))
	return s
}

// ErrNoAssets explains a missing control plane; callers skip with it.
var ErrNoAssets = fmt.Errorf("KUBEBUILDER_ASSETS is not set: run `make test` (it builds kube-apiserver and etcd with hack/build-control-plane.sh)")

// StartTimeout bounds how long a test control plane may take to become ready.
const StartTimeout = 2 * time.Minute

// Start boots the control plane, installs CRDs, webhooks and RBAC roles, and runs the
// manager. Call Stop when done.
func Start(opts Options) (*Env, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, ErrNoAssets
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(false), zap.Level(zapLevel())))
	root := RepoRoot()
	te := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(root, "config", "webhook", "manifests.yaml")}},
		// `go test ./...` starts several control planes at once on two cores: give
		// kube-apiserver longer than envtest's 20 s default before calling it failed.
		ControlPlaneStartTimeout: StartTimeout,
	}
	var agg *Aggregation
	if opts.Aggregation {
		var err error
		if agg, err = configureAggregation(te, opts.RequestTimeout); err != nil {
			return nil, fmt.Errorf("configuring aggregation: %w", err)
		}
	}
	cfg, err := te.Start()
	if err != nil {
		agg.cleanup()
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	e := &Env{Env: te, Config: cfg, Scheme: Scheme(), Root: root, Aggregation: agg}
	e.Client, err = client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}
	if err := e.installRoles(); err != nil {
		_ = te.Stop()
		return nil, err
	}
	if err := e.installNodeStatusPolicy(); err != nil {
		_ = te.Stop()
		return nil, err
	}
	if opts.Setup != nil {
		if err := e.startManager(opts.Setup, opts.WebhookTLSOpts); err != nil {
			_ = te.Stop()
			return nil, err
		}
	}
	return e, nil
}

func zapLevel() zapcore.Level {
	if os.Getenv("WORKBENCH_TEST_VERBOSE") != "" {
		return -2
	}
	return 2
}

// installRoles applies the hand-written ClusterRoles from config/rbac.
func (e *Env) installRoles() error {
	for _, f := range []string{"operator_role.yaml", "agent_role.yaml", "viewer_role.yaml", "view_observer_role.yaml", "node_agent_role.yaml"} {
		raw, err := os.ReadFile(filepath.Join(e.Root, "config", "rbac", f))
		if err != nil {
			return fmt.Errorf("reading role %s: %w", f, err)
		}
		var role rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict(raw, &role); err != nil {
			return fmt.Errorf("decoding role %s: %w", f, err)
		}
		if err := e.Client.Create(context.Background(), &role); err != nil {
			return fmt.Errorf("creating role %s: %w", role.Name, err)
		}
	}
	return nil
}

// installNodeStatusPolicy applies config/webhook/node_status_policy.yaml (the node
// restriction for status writes, a ValidatingAdmissionPolicy and its binding).
func (e *Env) installNodeStatusPolicy() error {
	f := filepath.Join(e.Root, "config", "webhook", "node_status_policy.yaml")
	raw, err := os.ReadFile(f)
	if err != nil {
		return fmt.Errorf("reading %s: %w", f, err)
	}
	docs := strings.Split(string(raw), "\n---\n")
	if len(docs) != 2 {
		return fmt.Errorf("%s: want a policy and its binding, got %d documents", f, len(docs))
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &policy); err != nil {
		return fmt.Errorf("decoding the policy in %s: %w", f, err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &binding); err != nil {
		return fmt.Errorf("decoding the binding in %s: %w", f, err)
	}
	ctx := context.Background()
	for _, o := range []client.Object{&policy, &binding} {
		if err := e.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s: %w", o.GetName(), err)
		}
	}
	// kube-apiserver's policy admission picks the pair up from its own watch, well before
	// the manager started next serves its first webhook call. (Its type-checking status is
	// written by kube-controller-manager, which envtest does not run.)
	return nil
}

func (e *Env) startManager(setup func(ctrl.Manager) error, tlsOpts []func(*tls.Config)) error {
	wo := &e.Env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme: e.Scheme,
		// As cmd/manager (controllers.CacheOptions, not imported: controllers' tests use this package).
		Cache:   cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhooks.Instrument(webhook.NewServer(webhook.Options{
			Host: wo.LocalServingHost, Port: wo.LocalServingPort, CertDir: wo.LocalServingCertDir, TLSOpts: tlsOpts,
		})),
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := setup(mgr); err != nil {
		return fmt.Errorf("setting up manager: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.stop, e.done = cancel, make(chan error, 1)
	go func() { e.done <- mgr.Start(ctx) }()
	// The webhook server must answer before the API server can admit anything.
	addr := net.JoinHostPort(wo.LocalServingHost, fmt.Sprint(wo.LocalServingPort))
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe of our own test server
		if err == nil {
			_ = conn.Close()
			break
		}
		if time.Now().After(deadline) {
			cancel()
			return fmt.Errorf("webhook server at %s did not answer within 30s: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		return fmt.Errorf("manager cache did not sync")
	}
	return nil
}

// Stop stops the manager and the control plane.
func (e *Env) Stop() {
	if e.stop != nil {
		e.stop()
		if err := <-e.done; err != nil {
			fmt.Fprintf(os.Stderr, "envtest: the manager ended with an error: %v\n", err)
		}
	}
	_ = e.Env.Stop()
	e.Aggregation.cleanup()
}

// As returns a client that impersonates user (and groups).
func (e *Env) As(user string, groups ...string) (client.Client, error) {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return client.New(cfg, client.Options{Scheme: e.Scheme})
}

// Bind grants a ClusterRole to a user, cluster-wide or in one namespace.
func (e *Env) Bind(ctx context.Context, role, user, namespace string) error {
	subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
	name := role + "-" + user
	var err error
	if namespace == "" {
		err = e.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subj, RoleRef: ref})
	} else {
		err = e.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Subjects: subj, RoleRef: ref})
	}
	if err != nil {
		return err
	}
	return e.WaitAuthorized(ctx, user, namespace)
}

// WaitAuthorized waits (at most 10 s) until the API server's authorizer has seen a new
// binding: every workbench role may get terminalcommands, so a SubjectAccessReview for
// that turns true once the binding is in effect. Tests then never race RBAC propagation.
func (e *Env) WaitAuthorized(ctx context.Context, user, namespace string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "get", Group: wbv1.GroupVersion.Group, Resource: "terminalcommands"}}}
		if err := e.Client.Create(ctx, sar); err != nil {
			return err
		}
		if sar.Status.Allowed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("binding for %q in %q not in effect after 10s", user, namespace)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

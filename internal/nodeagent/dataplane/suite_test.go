package dataplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/test/envtest"
)

// suite is the shared API-server fixture: service accounts bound to the real
// ClusterRoles from config/rbac, their TokenRequest tokens, and a client with
// the node agent's own identity (workbench-node-agent) for TokenReview and
// SubjectAccessReview.
type suite struct {
	env *envtest.Env
	// tokens by identity: operator, agent, agent2, viewer (bound in ns), nobody.
	tokens map[string]string
	// nodeClient authenticates as the node agent's service account.
	nodeClient client.Client
}

const (
	testNS  = "dp"
	otherNS = "dp-other"
)

var (
	fx *suite
	// skipReason explains why the API-server tests skip.
	skipReason string
)

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper() // sessions start through the sandbox helper (this binary)
	env, err := envtest.Start(envtest.Options{})
	switch {
	case errors.Is(err, envtest.ErrNoAssets):
		skipReason = err.Error()
	case err != nil:
		fmt.Fprintln(os.Stderr, "starting control plane:", err)
		os.Exit(1)
	default:
		fx, err = newSuite(env)
		if err != nil {
			env.Stop()
			fmt.Fprintln(os.Stderr, "preparing the data plane suite:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if env != nil {
		env.Stop()
	}
	os.Exit(code)
}

// requireAPIServer returns the fixture or skips with the exact reason.
func requireAPIServer(tb testing.TB) *suite {
	tb.Helper()
	if fx == nil {
		tb.Skip(skipReason)
	}
	return fx
}

func newSuite(env *envtest.Env) (*suite, error) {
	ctx := context.Background()
	c := env.Client
	for _, ns := range []string{testNS, otherNS, "dp-system"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	s := &suite{env: env, tokens: map[string]string{}}
	for id, role := range map[string]string{"operator": "workbench-operator", "agent": "workbench-agent", "agent2": "workbench-agent", "viewer": "workbench-viewer", "nobody": ""} {
		tok, err := serviceAccountToken(ctx, c, testNS, id)
		if err != nil {
			return nil, err
		}
		s.tokens[id] = tok
		if role == "" {
			continue
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: testNS},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: id, Namespace: testNS}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		}
		if err := c.Create(ctx, rb); err != nil {
			return nil, fmt.Errorf("binding %s: %w", id, err)
		}
	}
	nodeTok, err := serviceAccountToken(ctx, c, "dp-system", "node-agent")
	if err != nil {
		return nil, err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "dp-node-agent"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "node-agent", Namespace: "dp-system"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "workbench-node-agent"},
	}
	if err := c.Create(ctx, crb); err != nil {
		return nil, fmt.Errorf("binding the node agent: %w", err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = nodeTok
	if s.nodeClient, err = client.New(cfg, client.Options{Scheme: env.Scheme}); err != nil {
		return nil, fmt.Errorf("node agent client: %w", err)
	}
	return s, nil
}

// serviceAccountToken creates ServiceAccount ns/name and returns a bound
// token from the TokenRequest API (serviceaccounts/token).
func serviceAccountToken(ctx context.Context, c client.Client, ns, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if err := c.Create(ctx, sa); err != nil {
		return "", fmt.Errorf("creating service account %s/%s: %w", ns, name, err)
	}
	exp := int64(3600)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("requesting a token for %s/%s: %w", ns, name, err)
	}
	if tr.Status.Token == "" {
		return "", fmt.Errorf("token request for %s/%s returned no token", ns, name)
	}
	return tr.Status.Token, nil
}

// startKubeServer serves a data plane that authenticates with TokenReview and
// authorizes with SubjectAccessReview as the node agent.
func startKubeServer(tb testing.TB, lim Limits, authzCache CacheOptions, opts ...func(*Server)) *testServer {
	tb.Helper()
	s := requireAPIServer(tb)
	authn, err := NewTokenReviewAuthenticator(s.nodeClient, TokenReviewOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	authz, err := NewSubjectAccessReviewAuthorizer(s.nodeClient, authzCache)
	if err != nil {
		tb.Fatal(err)
	}
	return startServer(tb, authn, authz, lim, opts...)
}

package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"
)

// TestMetricsAuthenticatedAndAuthorized runs a manager with the metrics options of
// cmd/manager against a real API server and scrapes its /metrics: without a token the
// answer is 401, with a token that does not authenticate no metrics, with a service account token whose account has no role 403, and with a
// token of an account bound to config/rbac/metrics_reader_role.yaml (as shipped) 200 with
// Prometheus text.
func TestMetricsAuthenticatedAndAuthorized(t *testing.T) {
	cfg := startAPIServer(t)
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The shipped metrics-reader role, exactly as config/rbac has it.
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "metrics_reader_role.yaml"))
	must(t, err)
	var reader rbacv1.ClusterRole
	must(t, yaml.UnmarshalStrict(raw, &reader))
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &reader, metav1.CreateOptions{})
	must(t, err)

	const ns = "wb-metrics"
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, err)
	token := func(sa string) string {
		t.Helper()
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		must(t, err)
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))}}, metav1.CreateOptions{})
		must(t, err)
		return tr.Status.Token
	}
	noRole, scraper := token("no-role"), token("scraper")
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "wb-metrics-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "scraper"}},
	}, metav1.CreateOptions{})
	must(t, err)
	// The metrics server caches a denial for 30 s: ask the API server first until the
	// binding is in effect, so the one scrape below is decided on the binding.
	for {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + ns + ":scraper", Groups: []string{"system:serviceaccounts"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}, metav1.CreateOptions{})
		must(t, err)
		if sar.Status.Allowed {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the binding never allowed get /metrics: %+v", sar.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	must(t, l.Close())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsOptions(addr, nil), HealthProbeBindAddress: "0"})
	must(t, err)
	ended := runManager(ctx, t, mgr)

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the server's certificate is self-signed; the test checks authn/authz, not TLS identity
	}}
	scrape := func(bearer string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(body), err
	}
	// The server starts with the manager: wait until it accepts a TLS connection.
	for {
		code, _, err := scrape("")
		if err == nil {
			if code != http.StatusUnauthorized {
				t.Fatalf("unauthenticated scrape: %d, want 401", code)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("metrics server at %s never answered: %v", addr, err)
		case <-ended:
			t.Fatalf("the manager stopped before its metrics server answered (its error is reported at cleanup)")
		case <-time.After(100 * time.Millisecond):
		}
	}
	// A token the TokenReview rejects: controller-runtime's filter answers 500
	// "Authentication failed" (the review's error is passed up as an error) rather than
	// 401, but never serves the metrics.
	if code, body, err := scrape("not-a-token"); err != nil || (code != http.StatusUnauthorized && code != http.StatusInternalServerError) || strings.Contains(body, "# TYPE ") {
		t.Fatalf("scrape with an invalid token: %d %v: %.200s", code, err, body)
	}
	for _, tc := range []struct {
		name  string
		token string
		want  int
	}{
		{"service account without the role", noRole, http.StatusForbidden},
		{"service account bound to workbench-metrics-reader", scraper, http.StatusOK},
	} {
		code, body, err := scrape(tc.token)
		must(t, err)
		if code != tc.want {
			t.Fatalf("%s: %d, want %d: %s", tc.name, code, tc.want, body)
		}
		if code == http.StatusOK && !strings.Contains(body, "# TYPE ") {
			t.Fatalf("%s: the body is not Prometheus text: %.200s", tc.name, body)
		}
		t.Logf("%s: %d", tc.name, code)
	}
	// Plain HTTP is not served.
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics"); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP scrape answered 200")
		}
	}
}

package nodeagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/nodeagent/dataplane"
)

// tokenFor creates a ServiceAccount bound to role in ns and returns a token for it.
func tokenFor(t *testing.T, ns, name, role string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	must(t, env.Client.Create(ctx, sa))
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}))
	must(t, env.WaitAuthorized(ctx, "system:serviceaccount:"+ns+":"+name, ns))
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600)), Audiences: []string{agent.DataPlaneAudience()}}}
	must(t, env.Client.SubResource("token").Create(ctx, sa, tr))
	return tr.Status.Token
}

// dataPlaneClient reads the node's published endpoint and CA from its WorkbenchNode.
func dataPlaneClient(t *testing.T) (string, *http.Client) {
	t.Helper()
	var node wbv1.WorkbenchNode
	eventually(t, 30*time.Second, "the data plane endpoint on the WorkbenchNode", func() (bool, string) {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: nodeName}, &node); err != nil {
			return false, err.Error()
		}
		return node.Status.DataPlane != nil && node.Status.DataPlane.Endpoint != "", fmt.Sprintf("%+v", node.Status.DataPlane)
	})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(node.Status.DataPlane.CABundle)) {
		t.Fatal("the published CA bundle holds no certificate")
	}
	return node.Status.DataPlane.Endpoint, &http.Client{Timeout: 40 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

func call(t *testing.T, c *http.Client, method, url, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		must(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	must(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	must(t, err)
	defer func() { _ = resp.Body.Close() }()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out
}

// TestDataPlanePTYSession drives an interactive PTY session through the node's HTTPS data
// plane with Kubernetes tokens: the operator's raw input reaches the program and its echo
// comes back through the event cursor; an agent may read screens but never type.
func TestDataPlanePTYSession(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	must(t, env.Client.Create(ctx, profile(ns, "cat", "/bin/cat", nil, nil, func(s *wbv1.CommandProfileSpec) { s.PTY = "Allowed" })))
	must(t, env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "pty", Namespace: ns}, Spec: wbv1.TerminalSessionSpec{
		EnvironmentRef: "e", ShellProfileRef: ptr(wbv1.ObjectName("cat")), RawInput: wbv1.RawInputOperatorOnly}}))
	eventually(t, 30*time.Second, "the PTY session running", func() (bool, string) {
		var s wbv1.TerminalSession
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pty"}, &s))
		return s.Status.Phase == wbv1.SessionRunning, fmt.Sprintf("%+v", s.Status)
	})
	endpoint, hc := dataPlaneClient(t)
	opToken := tokenFor(t, ns, "op", "workbench-operator")
	agentToken := tokenFor(t, ns, "ag", "workbench-agent")

	if code, _ := call(t, hc, http.MethodGet, endpoint+dataplane.SessionPath(ns, "pty", "screen"), "", nil); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	if code, body := call(t, hc, http.MethodPost, endpoint+dataplane.SessionPath(ns, "pty", "input"), agentToken,
		dataplane.InputRequest{Data: []byte("nope\n")}); code != http.StatusForbidden {
		t.Fatalf("agent raw input: %d %s", code, body)
	}
	if code, body := call(t, hc, http.MethodPost, endpoint+dataplane.SessionPath(ns, "pty", "input"), opToken,
		dataplane.InputRequest{Data: []byte("hello workbench\n")}); code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("operator input: %d %s", code, body)
	}
	var seen strings.Builder
	cursor := uint64(0)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(seen.String(), "hello workbench") && time.Now().Before(deadline) {
		code, body := call(t, hc, http.MethodGet, fmt.Sprintf("%s%s?cursor=%d&waitSeconds=5", endpoint, dataplane.SessionPath(ns, "pty", "events"), cursor), agentToken, nil)
		if code != http.StatusOK {
			t.Fatalf("events as agent: %d %s", code, body)
		}
		var ev dataplane.EventsResponse
		must(t, json.Unmarshal(body, &ev))
		for _, e := range ev.Events {
			seen.Write(e.Data)
		}
		cursor = ev.Next
	}
	if !strings.Contains(seen.String(), "hello workbench") {
		t.Fatalf("echo not seen through the event cursor: %q", seen.String())
	}
	code, body := call(t, hc, http.MethodGet, endpoint+dataplane.SessionPath(ns, "pty", "screen"), agentToken, nil)
	if code != http.StatusOK || !strings.Contains(string(body), "hello workbench") {
		t.Fatalf("screen as agent: %d %s", code, body)
	}
	// Files beneath the root, never beyond it.
	must(t, writeFile(dir+"/notes.txt", "inside\n"))
	code, body = call(t, hc, http.MethodGet, endpoint+dataplane.FilesPath(ns, "e", "read")+"?root=repo&path=notes.txt", opToken, nil)
	if code != http.StatusOK || !strings.Contains(string(body), "aW5zaWRlCg==") {
		t.Fatalf("file read: %d %s", code, body)
	}
	code, body = call(t, hc, http.MethodGet, endpoint+dataplane.FilesPath(ns, "e", "read")+"?root=repo&path=../../etc/passwd", opToken, nil)
	if code == http.StatusOK || !strings.Contains(string(body), "path-traversal") {
		t.Fatalf("traversal: %d %s", code, body)
	}
	// Closing the session is declarative and idempotent; the PTY's process group is gone after.
	askSessionClosed(t, ns, "pty")
	waitSessionClosedClean(t, ns, "pty", "the session closed with cleanup complete")
}

// TestDataPlaneTokenAudience: the data plane accepts only tokens minted for its own
// audience; a token for the API server (the default audience) is refused, so a node never
// receives a token it could replay against the API server.
func TestDataPlaneTokenAudience(t *testing.T) {
	ctx := context.Background()
	ns, _ := readyWorkEnvironment(t)
	endpoint, hc := dataPlaneClient(t)
	tokenFor(t, ns, "op", "workbench-operator") // binds the role; its token carries the data-plane audience
	apiTok := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))}}
	must(t, env.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: ns}}, apiTok))
	if code, body := call(t, hc, http.MethodGet, endpoint+dataplane.SessionPath(ns, "s", "events"), apiTok.Status.Token, nil); code != http.StatusUnauthorized {
		t.Fatalf("an API-server-audience token: %d %s, want 401", code, body)
	}
	dpTok := tokenAudience(t, ns, "op", agent.DataPlaneAudience())
	if code, body := call(t, hc, http.MethodGet, endpoint+dataplane.SessionPath(ns, "s", "events"), dpTok, nil); code != http.StatusOK {
		t.Fatalf("a data-plane-audience token: %d %s, want 200", code, body)
	}
}

func tokenAudience(t *testing.T, ns, sa, aud string) string {
	t.Helper()
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600)), Audiences: []string{aud}}}
	must(t, env.Client.SubResource("token").Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}, tr))
	return tr.Status.Token
}

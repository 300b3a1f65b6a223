package nodeagent

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/dpclient"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
)

// tokenFor creates a ServiceAccount bound to role in ns and returns a token for it.
func tokenFor(t *testing.T, ns, name, role string) string {
	t.Helper()
	token, err := nodeagenttest.TokenFor(context.Background(), env, ns, name, role)
	must(t, err)
	return token
}

// dataPlane is a client of the node's data plane (its published endpoint and CA).
func dataPlane(t *testing.T) dpclient.Client {
	t.Helper()
	return dataPlaneOf(t, nodeName)
}

// TestDataPlanePTYSession drives an interactive PTY session through the node's HTTPS data
// plane with Kubernetes tokens: the operator's raw input (an attach with stdin) reaches the
// program and its echo comes back through the event stream; an agent may read screens but
// never type.
func TestDataPlanePTYSession(t *testing.T) {
	ns, dir := readyWorkEnvironment(t)
	catPTYSession(t, ns, "e", "/bin/cat", 30*time.Second)
	dp := dataPlane(t)
	opToken := tokenFor(t, ns, "op", "workbench-operator")
	agentToken := tokenFor(t, ns, "ag", "workbench-agent")

	dp.Expect(t, http.MethodGet, dpclient.SessionPath(ns, "pty", "screen"), "", nil, http.StatusUnauthorized, "unauthenticated")
	dp.ExpectAttachRefused(t, agentToken, ns, "pty", true, http.StatusForbidden, "forbidden")
	dp.Echo(t, opToken, agentToken, ns, "pty", "hello workbench", 1, 20*time.Second)
	code, body := dp.Call(t, http.MethodGet, dpclient.SessionPath(ns, "pty", "screen"), agentToken, nil)
	if code != http.StatusOK || !strings.Contains(string(body), "hello workbench") {
		t.Fatalf("screen as agent: %d %s", code, body)
	}
	// Files beneath the root, never beyond it.
	must(t, writeFile(dir+"/notes.txt", "inside\n"))
	code, body, _ = dp.Get(t, dpclient.FilesPath(ns, "e")+"?op=read&root=repo&path=notes.txt", opToken)
	if code != http.StatusOK || string(body) != "inside\n" {
		t.Fatalf("file read: %d %s", code, body)
	}
	dp.Expect(t, http.MethodGet, dpclient.FilesPath(ns, "e")+"?op=read&root=repo&path=../../etc/passwd", opToken, nil, http.StatusBadRequest, "path-traversal")
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
	dp := dataPlane(t)
	tokenFor(t, ns, "op", "workbench-operator") // binds the role; its token carries the data-plane audience
	apiTok := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))}}
	must(t, env.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: ns}}, apiTok))
	if code, body := dp.Call(t, http.MethodGet, dpclient.SessionPath(ns, "s", "events"), apiTok.Status.Token, nil); code != http.StatusUnauthorized {
		t.Fatalf("an API-server-audience token: %d %s, want 401", code, body)
	}
	dpTok := tokenAudience(t, ns, "op", agent.DataPlaneAudience())
	if code, body := dp.Call(t, http.MethodGet, dpclient.SessionPath(ns, "s", "events"), dpTok, nil); code != http.StatusOK {
		t.Fatalf("a data-plane-audience token: %d %s, want 200", code, body)
	}
}

func tokenAudience(t *testing.T, ns, sa, aud string) string {
	t.Helper()
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600)), Audiences: []string{aud}}}
	must(t, env.Client.SubResource("token").Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}, tr))
	return tr.Status.Token
}

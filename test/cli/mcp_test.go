package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/mcpserver"
)

// agentTools are the tools the server must offer, and nothing that approves or types.
var agentTools = []string{"command_result", "create_environment", "events", "list_consent_requests", "list_environments",
	"probe", "propose_patch", "read_file", "run_action", "run_command", "screen", "snapshot_files", "wait"}

// mcpFixture makes a namespace with the git profiles and a Ready environment over a repo.
func mcpFixture(t *testing.T) string {
	t.Helper()
	ns := namespace(t)
	gitProfile(t, ns)
	strict := &wbv1.CommandProfile{}
	must(t, st.Env.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: "git-readonly"}, strict))
	strict.ObjectMeta = metav1.ObjectMeta{Name: "git-strict", Namespace: ns}
	strict.Spec.ConsentPrompting = wbv1.ConsentPromptingForbidden
	must(t, st.Env.Client.Create(context.Background(), strict))
	environment(t, ns, "e", gitRepo(t))
	return ns
}

func call(t *testing.T, s *mcp.ClientSession, name string, args any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	var out map[string]any
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out)
	}
	return res, out
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// exerciseAgentTools is what an agent's MCP host does; shared by both transports.
func exerciseAgentTools(t *testing.T, s *mcp.ClientSession) {
	t.Helper()
	tools, err := s.ListTools(context.Background(), nil)
	must(t, err)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.InputSchema == nil {
			t.Errorf("tool %s has no input schema", tool.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, agentTools) {
		t.Fatalf("tools = %v, want %v (no raw input, no approval)", names, agentTools)
	}

	res, out := call(t, s, "list_environments", map[string]any{})
	if res.IsError || !strings.Contains(fmt.Sprint(out), "name:e") {
		t.Fatalf("list_environments: %s %v", text(res), out)
	}
	res, out = call(t, s, "run_command", map[string]any{"argv": []string{"git", "status"}, "environment": "e"})
	if res.IsError || out["phase"] != "Succeeded" || out["exitCode"] != float64(0) {
		t.Fatalf("run_command git status: %s %v", text(res), out)
	}
	res, out = call(t, s, "run_command", map[string]any{"argv": []string{"git", "push"}, "environment": "e", "profile": "git-strict"})
	meta, _ := res.Meta[mcpserver.RefusalMeta].(map[string]any)
	if !res.IsError || meta["code"] != "profile-missing" || !strings.Contains(text(res), "refused [profile-missing") {
		t.Fatalf("a refused argv must be a tool error with its code: %s meta=%v out=%v", text(res), res.Meta, out)
	}
	res, out = call(t, s, "run_command", map[string]any{"argv": []string{"git", "diff"}, "environment": "e"})
	consent, _ := out["consent"].(map[string]any)
	if res.IsError || out["phase"] != "AwaitingConsent" || consent == nil || !strings.Contains(fmt.Sprint(consent["approveCommand"]), "consent approve") {
		t.Fatalf("run_command needing consent: %s %v", text(res), out)
	}
	waiting := consent["request"]
	res, out = call(t, s, "list_consent_requests", map[string]any{})
	if res.IsError || !strings.Contains(fmt.Sprint(out["requests"]), fmt.Sprintf("request:%v", waiting)) {
		t.Fatalf("list_consent_requests: %s %v", text(res), out)
	}
	res, out = call(t, s, "probe", map[string]any{"kind": "environment.ready", "environment": "e"})
	if res.IsError || out["status"] != "Pass" {
		t.Fatalf("probe environment.ready: %s %v", text(res), out)
	}
}

// mcpStdio starts `kubectl-workbench mcp` in ns as user, with the Go SDK's own client as
// the agent, for at most timeout; it returns the call context and the session, both ended
// when the test ends.
func mcpStdio(t *testing.T, timeout time.Duration, ns, user string) (context.Context, *mcp.ClientSession) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	client := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-test", Version: "v0"}, nil)
	s, err := client.Connect(ctx, &mcp.CommandTransport{Command: kwCommand(ctx, ns, user, "mcp")}, nil)
	must(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return ctx, s
}

// TestMCPStdio drives `kubectl-workbench mcp` with the Go SDK's own client as the agent.
func TestMCPStdio(t *testing.T) {
	ns := mcpFixture(t)
	_, s := mcpStdio(t, 5*time.Minute, ns, agentUser)
	exerciseAgentTools(t, s)
}

// TestMCPHTTP drives workbench-mcp over streamable HTTP with a ServiceAccount token bound to
// workbench-agent. The server is started with the admin kubeconfig, yet a tool call can do
// only what the token's identity may: creating an environment is forbidden to an agent.
// Requests without a token are refused.
func TestMCPHTTP(t *testing.T) {
	ns := mcpFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	token := agentToken(t, ns)
	addr := freeAddr(t)
	srv := exec.CommandContext(ctx, st.Bin("workbench-mcp"), "--listen", addr, "--kubeconfig", st.Kubeconfig, "--namespace", ns)
	must(t, srv.Start())
	t.Cleanup(func() { cancel(); _ = srv.Wait() })
	endpoint := "http://" + addr + "/mcp"
	waitListening(t, addr)

	// No token: 401.
	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{}`))
	must(t, err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a request without a token got %d, want 401", resp.StatusCode)
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-test", Version: "v0"}, nil)
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
	must(t, err)
	defer func() { _ = s.Close() }()
	exerciseAgentTools(t, s)
	res, _ := call(t, s, "create_environment", map[string]any{"name": "x", "roots": map[string]string{"repo": st.Workspace}})
	meta, _ := res.Meta[mcpserver.RefusalMeta].(map[string]any)
	if !res.IsError || meta["class"] != "forbidden" {
		t.Fatalf("the agent's token must not create environments through the server: %s %v", text(res), res.Meta)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// agentToken is a token of a ServiceAccount bound to workbench-agent in ns.
func agentToken(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	c := st.Env.Client
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}}
	must(t, c.Create(ctx, sa))
	must(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "agent", Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "workbench-agent"}}))
	must(t, st.Env.WaitAuthorized(ctx, "system:serviceaccount:"+ns+":agent", ns))
	exp := int64(600)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}
	must(t, c.SubResource("token").Create(ctx, sa, tr))
	return tr.Status.Token
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s after 30s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

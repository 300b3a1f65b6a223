package aggregated

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/apiserver"
	dpprotocol "sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/internal/test/testkit"
)

// saUser creates ServiceAccount ns/name bound to role and returns a rest config carrying its
// own bearer token: kube-apiserver authenticates, authorizes and audits that identity.
func saUser(t testing.TB, ns, name, role string) (*rest.Config, string) {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	must(t, env.Client.Create(ctx, sa))
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}))
	username := "system:serviceaccount:" + ns + ":" + name
	must(t, env.WaitAuthorized(ctx, username, ns))
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}
	must(t, env.Client.SubResource("token").Create(ctx, sa, tr))
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg, username
}

// hostURL is cfg.Host without a trailing slash.
func hostURL(cfg *rest.Config) string { return strings.TrimSuffix(cfg.Host, "/") }

func subPath(ns, resource, name, sub string) string {
	return "/apis/" + apiserver.GroupName + "/" + apiserver.Version + "/namespaces/" + ns + "/" + resource + "/" + name + "/" + sub
}

// do sends one request through kube-apiserver as cfg's identity.
func do(t testing.TB, cfg *rest.Config, method, path string, body any) (int, []byte, http.Header) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	must(t, err)
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		must(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, hostURL(cfg)+path, rd)
	must(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	must(t, err)
	defer func() { _ = resp.Body.Close() }()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, out, resp.Header
}

// stream runs the remote command WebSocket protocol as cfg's identity.
func stream(ctx context.Context, cfg *rest.Config, path string, opts remotecommand.StreamOptions) error {
	exec, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, hostURL(cfg)+path)
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, opts)
}

// syncBuffer is a goroutine-safe output sink.
type syncBuffer = testkit.LockedBuffer

// ptySession is a TerminalSession running /bin/cat in a PTY with operator raw input.
func ptySession(ns string) *wbv1.TerminalSession {
	return &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "pty", Namespace: ns}, Spec: wbv1.TerminalSessionSpec{
		ShellProfileRef: ptr(wbv1.ObjectName("cat")), RawInput: wbv1.RawInputOperatorOnly}}
}

func setupSessions(t *testing.T, ns string) string {
	t.Helper()
	must(t, env.Client.Create(context.Background(), profile(ns, "cat", "/bin/cat", func(s *wbv1.CommandProfileSpec) {
		s.PTY, s.AllowedArgPrefixes = "Allowed", nil
	})))
	return readyEnvironment(t, ns, ptySession(ns),
		&wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
}

// TestDiscovery: the group is served through kube-apiserver and discovery lists every
// subresource with its verbs, so `kubectl api-resources` and `kubectl auth can-i` work.
func TestDiscovery(t *testing.T) {
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	must(t, err)
	list, err := dc.ServerResourcesForGroupVersion(apiserver.GroupName + "/" + apiserver.Version)
	must(t, err)
	verbs := map[string][]string{}
	for _, r := range list.APIResources {
		verbs[r.Name] = r.Verbs
	}
	for _, s := range apiserver.Subresources {
		v, ok := verbs[s.Resource+"/"+s.Name]
		if !ok {
			t.Errorf("discovery lacks %s/%s: %v", s.Resource, s.Name, verbs)
			continue
		}
		want := "get"
		if s.Methods[0] != http.MethodGet {
			want = "create"
		}
		if !strings.Contains(strings.Join(v, ","), want) {
			t.Errorf("%s/%s verbs %v lack %s", s.Resource, s.Name, v, want)
		}
	}
	// Parents carry a verb, so `kubectl api-resources` lists them.
	for _, p := range []string{"terminalsessions", "terminalcommands", "environments", "artifacts"} {
		if v := verbs[p]; len(v) == 0 || v[0] != "get" {
			t.Errorf("discovery parent %s verbs %v, want [get]", p, v)
		}
	}
}

// TestRBACPerSubresource: kube-apiserver's RBAC decides each subresource; the node decides
// again for the forwarded end user. The agent streams output and events and may watch a
// session read-only, but attaching with input is Forbidden; a viewer reads screens only.
func TestRBACPerSubresource(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	setupSessions(t, ns)
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", func(s *wbv1.CommandProfileSpec) { s.AllowedArgPrefixes = []string{"hello"} })))
	must(t, env.Client.Create(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "p", Argv: []string{"/bin/echo", "hello"}, Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 20}}))
	agentCfg, _ := saUser(t, ns, "agent", "workbench-agent")
	viewerCfg, _ := saUser(t, ns, "viewer", "workbench-viewer")

	eventually(t, 30*time.Second, "the agent reading the command's output", func() (bool, string) {
		code, body, _ := do(t, agentCfg, http.MethodGet, subPath(ns, "terminalcommands", "c", "output")+"?follow=true", nil)
		return code == http.StatusOK && string(body) == "hello\n", fmt.Sprintf("%d %q", code, body)
	})
	if code, body, h := do(t, agentCfg, http.MethodGet, subPath(ns, "terminalsessions", "pty", "events"), nil); code != http.StatusOK || h.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("agent events: %d %s %v", code, body, h)
	}
	if code, body, _ := do(t, agentCfg, http.MethodGet, subPath(ns, "terminalsessions", "pty", "screen"), nil); code != http.StatusOK {
		t.Fatalf("agent screen: %d %s", code, body)
	}
	if code, body, _ := do(t, agentCfg, http.MethodPost, subPath(ns, "terminalsessions", "pty", "resize"), map[string]int{"rows": 30, "cols": 100}); code != http.StatusForbidden {
		t.Fatalf("agent resize: %d %s, want 403", code, body)
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := stream(sctx, agentCfg, subPath(ns, "terminalsessions", "pty", "attach")+"?stdin=true&stdout=true&tty=true",
		remotecommand.StreamOptions{Stdin: strings.NewReader("typed by the agent\n"), Stdout: io.Discard, Tty: true})
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "forbidden") {
		t.Fatalf("agent attach with stdin: %v, want Forbidden", err)
	}
	for _, p := range []string{subPath(ns, "terminalsessions", "pty", "events"), subPath(ns, "terminalcommands", "c", "output"),
		subPath(ns, "environments", "e", "files") + "?root=repo&op=snapshot"} {
		if code, body, _ := do(t, viewerCfg, http.MethodGet, p, nil); code != http.StatusForbidden {
			t.Errorf("viewer GET %s: %d %s, want 403", p, code, body)
		}
	}
	if code, body, _ := do(t, viewerCfg, http.MethodGet, subPath(ns, "terminalsessions", "pty", "screen"), nil); code != http.StatusOK {
		t.Fatalf("viewer screen: %d %s", code, body)
	}
	// A refusal carries its stable code in details.causes[0].reason and the message prefix.
	code, body, _ := do(t, agentCfg, http.MethodGet, subPath(ns, "environments", "e", "files")+"?root=repo&op=read&path=../../etc/passwd", nil)
	var st metav1.Status
	_ = json.Unmarshal(body, &st)
	if code != http.StatusBadRequest || st.Details == nil || len(st.Details.Causes) == 0 || st.Details.Causes[0].Type != "path-traversal" ||
		!strings.HasPrefix(st.Message, "path-traversal: ") {
		t.Fatalf("traversal: %d %s", code, body)
	}
}

// TestNodeRefusesUntrustedForwarding: identity headers sent to a node's data plane by
// anyone but workbench-apiserver's certificate are refused, so no user can claim another
// identity by calling the node directly.
func TestNodeRefusesUntrustedForwarding(t *testing.T) {
	ns := namespace(t)
	readyEnvironment(t, ns, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
	var node wbv1.WorkbenchNode
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Name: nodeName}, &node))
	hc := dataPlaneClient(t, &node)
	req, err := http.NewRequest(http.MethodGet, node.Status.DataPlane.Endpoint+dpprotocol.V2Path(ns, "terminalsessions", "s", "events"), nil)
	must(t, err)
	dpprotocol.SetForwardedUser(req.Header, "system:admin", "", []string{"system:masters"}, nil)
	resp, err := hc.Do(req)
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "forwarding-refused") {
		t.Fatalf("forged identity headers: %d %s, want 401 forwarding-refused", resp.StatusCode, body)
	}
}

// TestAttachRoundTrip: an operator attaches to a real PTY session through kube-apiserver
// with client-go's WebSocket executor; what it types comes back from the program.
func TestAttachRoundTrip(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	setupSessions(t, ns)
	opCfg, _ := saUser(t, ns, "op", "workbench-operator")
	inR, inW := io.Pipe()
	var out syncBuffer
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- stream(sctx, opCfg, subPath(ns, "terminalsessions", "pty", "attach")+"?stdin=true&stdout=true&tty=true",
			remotecommand.StreamOptions{Stdin: inR, Stdout: &out, Tty: true})
	}()
	for i := 0; ; i++ {
		_, err := fmt.Fprintf(inW, "round-trip-%d\n", i)
		must(t, err)
		if waitFor(&out, fmt.Sprintf("round-trip-%d", i), 2*time.Second) {
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("attach ended: %v; output %q", err, out.String())
		default:
		}
		if i > 10 {
			t.Fatalf("no echo through attach; output %q", out.String())
		}
	}
	cancel()
	_ = inW.Close()
	<-errc //nolint:errcheck // the attach ends by the cancel above: its error is that cancellation
	// The echo is in the session's events as UTF-8 text, never base64.
	code, body, _ := do(t, opCfg, http.MethodGet, subPath(ns, "terminalsessions", "pty", "events")+"?limit=1000", nil)
	if code != http.StatusOK {
		t.Fatalf("events: %d %s", code, body)
	}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var ev dpprotocol.SessionEvent
		must(t, json.Unmarshal(sc.Bytes(), &ev))
		if ev.Type == "output" && strings.Contains(ev.Text, "round-trip-") && ev.DataBase64 == nil {
			found = true
		}
	}
	if !found {
		t.Fatalf("no UTF-8 output event with the echo: %s", body)
	}
}

// waitFor polls buf (bounded) for sub.
func waitFor(buf *syncBuffer, sub string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(buf.String(), sub) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// TestCommandOutput: a command's output from its first byte, plain and over the WebSocket
// protocol with the exit code in the final status, and cancel of a running command.
func TestCommandOutput(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	dir := readyEnvironment(t, ns, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
	must(t, env.Client.Create(ctx, profile(ns, "seq", "/usr/bin/seq", func(s *wbv1.CommandProfileSpec) { s.AllowedArgPrefixes = []string{"1", "2"} })))
	must(t, env.Client.Create(ctx, profile(ns, "ls", "/bin/ls", func(s *wbv1.CommandProfileSpec) { s.AllowedArgPrefixes = []string{"/nonexistent"} })))
	must(t, env.Client.Create(ctx, profile(ns, "sleep", "/bin/sleep", func(s *wbv1.CommandProfileSpec) { s.AllowedArgPrefixes = []string{"3"} })))
	agentCfg, _ := saUser(t, ns, "agent", "workbench-agent")
	create := func(name, prof string, argv ...string) {
		must(t, env.Client.Create(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: wbv1.ObjectName(prof), Argv: argv, Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 30, OutputBytes: 1 << 20}}))
	}
	var want strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	create("seq", "seq", "/usr/bin/seq", "1", "20000")
	// Started as soon as the object exists: following waits for the command and yields the
	// output from the first byte to the last.
	var got []byte
	eventually(t, 30*time.Second, "following the output", func() (bool, string) {
		code, body, h := do(t, agentCfg, http.MethodGet, subPath(ns, "terminalcommands", "seq", "output")+"?follow=true", nil)
		got = body
		return code == http.StatusOK && h.Get("Content-Type") == "application/octet-stream" && len(body) > 0, fmt.Sprintf("%d %.200s", code, body)
	})
	if string(got) != want.String() {
		t.Fatalf("output: %d bytes starting %q, want %d bytes", len(got), got[:min(len(got), 40)], want.Len())
	}
	if code, body, _ := do(t, agentCfg, http.MethodGet, subPath(ns, "terminalcommands", "seq", "output")+"?limitBytes=10", nil); code != http.StatusOK || string(body) != "1\n2\n3\n4\n5\n" {
		t.Fatalf("limitBytes: %d %q", code, body)
	}

	// WebSocket: the bytes on stdout, then a Status with the exit code (as kubectl exec).
	create("ls", "ls", "/bin/ls", "/nonexistent-dir")
	var out syncBuffer
	var err error
	eventually(t, 30*time.Second, "the failing command's output over WebSocket", func() (bool, string) {
		out = syncBuffer{}
		err = stream(ctx, agentCfg, subPath(ns, "terminalcommands", "ls", "output")+"?follow=true",
			remotecommand.StreamOptions{Stdout: &out})
		return strings.Contains(out.String(), "nonexistent-dir"), fmt.Sprintf("%v %q", err, out.String())
	})
	var exitErr interface{ ExitStatus() int }
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 2 {
		t.Fatalf("exit status over WebSocket: %v (%T)", err, err)
	}

	// Cancel: the agent cancels its running command; it ends Cancelled.
	create("sleep", "sleep", "/bin/sleep", "3")
	eventually(t, 30*time.Second, "the sleep running", func() (bool, string) {
		var c wbv1.TerminalCommand
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sleep"}, &c))
		return c.Status.Phase == wbv1.CommandRunning, string(c.Status.Phase)
	})
	if code, body, _ := do(t, agentCfg, http.MethodPost, subPath(ns, "terminalcommands", "sleep", "cancel"), nil); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	kstate.Until(t, env.Client, 30*time.Second, "the sleep Cancelled", ns, "sleep", &wbv1.TerminalCommand{},
		func(c *wbv1.TerminalCommand) bool {
			return c.Status.Phase == wbv1.CommandCancelled
		})

	// Live: `tail -f` prints the file at once and never ends by itself. Its output arrives
	// over a followed WebSocket stream while it runs; cancel ends it and the stream.
	must(t, os.WriteFile(dir+"/live.txt", []byte("first line, while running\n"), 0o644))
	must(t, env.Client.Create(ctx, profile(ns, "tail", "/usr/bin/tail", func(s *wbv1.CommandProfileSpec) { s.AllowedArgPrefixes = []string{"-f", "live.txt"} })))
	create("tail", "tail", "/usr/bin/tail", "-f", "live.txt")
	var live syncBuffer
	done := make(chan error, 1)
	eventually(t, 30*time.Second, "the tail running", func() (bool, string) {
		var c wbv1.TerminalCommand
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tail"}, &c))
		return c.Status.Phase == wbv1.CommandRunning, string(c.Status.Phase)
	})
	go func() {
		done <- stream(ctx, agentCfg, subPath(ns, "terminalcommands", "tail", "output")+"?follow=true", remotecommand.StreamOptions{Stdout: &live})
	}()
	if !waitFor(&live, "first line, while running", 20*time.Second) {
		t.Fatalf("no live output while the command runs: %q", live.String())
	}
	select {
	case err := <-done:
		t.Fatalf("the followed stream ended while the command runs: %v", err)
	default:
	}
	if code, body, _ := do(t, agentCfg, http.MethodPost, subPath(ns, "terminalcommands", "tail", "cancel"), nil); code != http.StatusOK {
		t.Fatalf("cancel tail: %d %s", code, body)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "Cancelled") {
			t.Logf("stream of the cancelled command ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the followed stream did not end after cancel")
	}
}

// TestFiles: snapshot and read through the aggregated API.
func TestFiles(t *testing.T) {
	ns := namespace(t)
	dir := readyEnvironment(t, ns, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
	must(t, os.WriteFile(dir+"/notes.txt", []byte("inside\n"), 0o644))
	agentCfg, _ := saUser(t, ns, "agent", "workbench-agent")
	code, body, h := do(t, agentCfg, http.MethodGet, subPath(ns, "environments", "e", "files")+"?root=repo&op=read&path=notes.txt", nil)
	if code != http.StatusOK || string(body) != "inside\n" || !strings.HasPrefix(h.Get("X-Workbench-Digest"), "sha256:") || h.Get("X-Workbench-Size") != "7" {
		t.Fatalf("read: %d %q %v", code, body, h)
	}
	code, body, _ = do(t, agentCfg, http.MethodGet, subPath(ns, "environments", "e", "files")+"?root=repo&op=snapshot", nil)
	if code != http.StatusOK || !strings.Contains(string(body), "notes.txt") {
		t.Fatalf("snapshot: %d %s", code, body)
	}
}

// TestAuditLog: kube-apiserver's audit log records the subresource calls with the end
// user's name (runs last: the other tests made the calls).
func TestAuditLog(t *testing.T) {
	ns := namespace(t)
	readyEnvironment(t, ns, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
	cfg, username := saUser(t, ns, "auditee", "workbench-agent")
	if code, body, _ := do(t, cfg, http.MethodGet, subPath(ns, "terminalsessions", "s", "events"), nil); code != http.StatusOK {
		t.Fatalf("events: %d %s", code, body)
	}
	eventually(t, 10*time.Second, "the audit event", func() (bool, string) {
		raw, err := os.ReadFile(env.Aggregation.AuditLog)
		if err != nil {
			return false, err.Error()
		}
		for _, line := range bytes.Split(raw, []byte("\n")) {
			var ev struct {
				Verb      string `json:"verb"`
				Stage     string `json:"stage"`
				User      struct{ Username string }
				ObjectRef struct {
					APIGroup, Resource, Subresource, Namespace, Name string
				} `json:"objectRef"`
				ResponseStatus struct{ Code int } `json:"responseStatus"`
			}
			if json.Unmarshal(line, &ev) != nil {
				continue
			}
			if ev.User.Username == username && ev.ObjectRef.APIGroup == apiserver.GroupName && ev.ObjectRef.Resource == "terminalsessions" &&
				ev.ObjectRef.Subresource == "events" && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == "s" && ev.Verb == "get" && ev.ResponseStatus.Code == 200 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d bytes of audit log without the event", len(raw))
	})
}

// TestArtifactDownload: an exported artifact's blob through the aggregated API, with its
// digest; a viewer may not download.
func TestArtifactDownload(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	exportDir(t, ns, "result.txt", "exported\n")
	must(t, env.Client.Create(ctx, artifact(ns, "a", exportSpec(""))))
	a := waitStored(t, ns, "a")
	agentCfg, _ := saUser(t, ns, "agent", "workbench-agent")
	code, body, h := do(t, agentCfg, http.MethodGet, subPath(ns, "artifacts", "a", "download"), nil)
	if code != http.StatusOK || h.Get("X-Workbench-Digest") != string(a.Status.Digest) || int64(len(body)) != a.Status.Size ||
		!bytes.Contains(body, []byte("exported\n")) {
		t.Fatalf("download: %d %v (%d bytes)", code, h, len(body))
	}
	viewerCfg, _ := saUser(t, ns, "viewer", "workbench-viewer")
	if code, body, _ := do(t, viewerCfg, http.MethodGet, subPath(ns, "artifacts", "a", "download"), nil); code != http.StatusForbidden {
		t.Fatalf("viewer download: %d %s", code, body)
	}
}

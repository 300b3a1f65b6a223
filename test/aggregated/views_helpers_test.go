package aggregated

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/apiserver"
	"sensorium.dev/workbench/internal/nodeagent/dataplane"
	"sensorium.dev/workbench/internal/test/aggtest"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
)

// recvFrame is one line of a view stream with the moment the observer read it.
type recvFrame struct {
	dataplane.ViewFrame
	At   time.Time
	Conn int // which connection (1-based) delivered it
}

// observer follows a TerminalView's stream through kube-apiserver as one identity. It
// reconnects when a connection ends without a "closed" line (kube-apiserver's request
// timeout, a restarting node) or is refused with a 5xx (node unreachable, session not open
// yet), and stops at a "closed" line or a 4xx refusal, recording its code.
type observer struct {
	t    testing.TB
	cfg  *rest.Config
	path string

	mu       sync.Mutex
	frames   []recvFrame
	conns    int
	final    string // the code that stopped the observer
	lastCode string // the code of the last refusal seen (5xx included)
	stopped  chan struct{}
	cancel   context.CancelFunc
}

func watchView(t testing.TB, cfg *rest.Config, ns, view string) *observer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o := &observer{t: t, cfg: cfg, path: subPath(ns, "terminalviews", view, "stream"), stopped: make(chan struct{}), cancel: cancel}
	t.Cleanup(o.stop)
	go o.run(ctx)
	return o
}

func (o *observer) stop() {
	o.cancel()
	<-o.stopped
}

func (o *observer) run(ctx context.Context) {
	defer close(o.stopped)
	hc, err := rest.HTTPClientFor(o.cfg)
	if err != nil {
		o.setFinal("client: " + err.Error())
		return
	}
	for ctx.Err() == nil {
		code, done := o.connect(ctx, hc)
		if done {
			o.setFinal(code)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// connect runs one connection; done says the observer must stop (with code).
func (o *observer) connect(ctx context.Context, hc *http.Client) (string, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hostURL(o.cfg)+o.path, nil)
	if err != nil {
		return err.Error(), true
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", false
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		code := statusCode(body)
		o.mu.Lock()
		o.lastCode = code
		o.mu.Unlock()
		return code, resp.StatusCode < 500
	}
	o.mu.Lock()
	o.conns++
	conn := o.conns
	o.mu.Unlock()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 128<<10), 1<<20)
	for sc.Scan() {
		var f dataplane.ViewFrame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return "undecodable line: " + sc.Text(), true
		}
		o.mu.Lock()
		o.frames = append(o.frames, recvFrame{ViewFrame: f, At: time.Now(), Conn: conn})
		o.mu.Unlock()
		if f.Type == "closed" {
			o.mu.Lock()
			o.lastCode = f.Code
			o.mu.Unlock()
			return f.Code, true
		}
	}
	return "", false
}

func (o *observer) setFinal(code string) {
	o.mu.Lock()
	o.final = code
	o.mu.Unlock()
}

func (o *observer) snapshot() ([]recvFrame, string, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]recvFrame(nil), o.frames...), o.final, o.lastCode
}

// waitScreen waits for a frame whose screen contains sub.
func (o *observer) waitScreen(what, sub string, timeout time.Duration) recvFrame {
	o.t.Helper()
	return o.waitScreenFrom(0, what, sub, timeout)
}

// waitScreenFrom waits for a frame at index from or later whose screen contains sub.
func (o *observer) waitScreenFrom(from int, what, sub string, timeout time.Duration) recvFrame {
	o.t.Helper()
	var got recvFrame
	eventually(o.t, timeout, what, func() (bool, string) {
		frames, final, last := o.snapshot()
		for i := len(frames) - 1; i >= from; i-- {
			if frames[i].Type == "frame" && strings.Contains(strings.Join(frames[i].Lines, "\n"), sub) {
				got = frames[i]
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d frames, final %q, last code %q", len(frames), final, last)
	})
	return got
}

// waitFinal waits for the observer to stop and returns its code.
func (o *observer) waitFinal(what string, timeout time.Duration) string {
	o.t.Helper()
	select {
	case <-o.stopped:
	case <-time.After(timeout):
		_, _, last := o.snapshot()
		o.t.Fatalf("timed out after %s waiting for %s (last code %q)", timeout, what, last)
	}
	_, final, _ := o.snapshot()
	return final
}

// statusCode is the refusal code of a metav1.Status body (details.causes[0].type or the
// message prefix), or the Status reason.
func statusCode(body []byte) string {
	var st metav1.Status
	if json.Unmarshal(body, &st) != nil {
		return "undecodable: " + string(body)
	}
	if st.Details != nil && len(st.Details.Causes) > 0 && st.Details.Causes[0].Type != "" {
		return string(st.Details.Causes[0].Type)
	}
	if c, _, ok := strings.Cut(st.Message, ": "); ok && !strings.Contains(c, " ") {
		return c
	}
	return string(st.Reason)
}

// viewStream opens one stream and returns the status code and, for a refusal, its code.
func viewStatusOf(t testing.TB, cfg *rest.Config, ns, view string) (int, string) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hostURL(cfg)+subPath(ns, "terminalviews", view, "stream"), nil)
	must(t, err)
	resp, err := hc.Do(req)
	must(t, err)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, ""
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, statusCode(body)
}

// observerSA is a ServiceAccount holding workbench-view-observer in ns (membership) with a
// real token.
func observerSA(t testing.TB, ns, name string) (*rest.Config, string) {
	t.Helper()
	ctx := context.Background()
	must(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}))
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-observer", Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "workbench-view-observer"}}))
	username := "system:serviceaccount:" + ns + ":" + name
	waitMember(t, username, ns, true)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}
	must(t, env.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, tr))
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg, username
}

// observerUser is an impersonated user holding workbench-view-observer in ns.
func observerUser(t testing.TB, ns, name string) *rest.Config {
	t.Helper()
	must(t, env.Client.Create(context.Background(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-observer", Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "workbench-view-observer"}}))
	waitMember(t, name, ns, true)
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name}
	return cfg
}

// waitMember waits until RBAC does (or no longer does) allow user get terminalviews/stream.
func waitMember(t testing.TB, user, ns string, want bool) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("membership of %s in %s = %v", user, ns, want), func() (bool, string) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Group: apiserver.GroupName,
				Resource: "terminalviews", Subresource: "stream"}}}
		must(t, env.Client.Create(context.Background(), sar))
		return sar.Status.Allowed == want, fmt.Sprintf("%+v", sar.Status)
	})
}

// grant creates a ViewGrant as the granter (a client acting as the operator).
func grant(t testing.TB, as client.Client, ns, name, view string, subject wbv1.ViewSubject, ttl time.Duration) *wbv1.ViewGrant {
	t.Helper()
	g := &wbv1.ViewGrant{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.ViewGrantSpec{
		ViewRef: wbv1.ObjectName(view), Subject: subject, ExpiresAt: metav1.NewTime(time.Now().Add(ttl)), GrantedBy: "someone-else"}}
	must(t, as.Create(context.Background(), g))
	return g
}

// waitPatchPhase waits until FilePatch fp's status reads phase.
func waitPatchPhase(t testing.TB, fp *wbv1.FilePatch, phase wbv1.FilePatchPhase) {
	t.Helper()
	kstate.Until(t, env.Client, 30*time.Second, "the patch "+string(phase), fp.Namespace, fp.Name, &wbv1.FilePatch{},
		func(got *wbv1.FilePatch) bool { return got.Status.Phase == phase })
}

// revoke sets revoked on a grant as the granter and returns when the API server stored it.
func revoke(t testing.TB, as client.Client, ns, name string) time.Time {
	t.Helper()
	must(t, kstate.Update(as, ns, name, &wbv1.ViewGrant{}, func(g *wbv1.ViewGrant) { g.Spec.Revoked = ptr(true) }))
	return time.Now()
}

// agentProc is a node agent running as its own process (the real binary), so a test can
// kill it with SIGKILL.
type agentProc struct {
	cmd *exec.Cmd
}

// agentBinary builds the node agent once per run.
var agentBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "wb-views-agent-")
	if err != nil {
		return "", err
	}
	return nodeagenttest.BuildAgent(dir)
})

func buildAgent(t testing.TB) string {
	t.Helper()
	bin, err := agentBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// agentSetup prepares node's identity (user workbench:node:<node>, ClusterRole
// workbench-node-agent) and its configuration: root "work" at workspace, a data plane on a
// loopback port accepting forwarded identities only from workbench-apiserver's certificate.
func agentSetup(t testing.TB, node, workspace string) (kubeconfig, config string) {
	t.Helper()
	dir := t.TempDir()
	kubeconfig, err := nodeagenttest.NodeKubeconfig(env, node, dir)
	must(t, err)
	must(t, nodeagenttest.BindNodeAgent(context.Background(), env, node))
	config = filepath.Join(dir, "node-agent.yaml")
	must(t, os.WriteFile(config, []byte(fmt.Sprintf(
		"nodeName: %s\nstateDir: %s\nadmittedRoots:\n  work: %s\nheartbeatSeconds: 2\ndataPlaneAddress: 127.0.0.1:0\ndataPlaneForwardingCAFile: %s\ndataPlaneForwardingNames: [%s]\n",
		node, filepath.Join(dir, "state"), workspace, agg.NodeClientCAFile, aggtest.NodeClientName)), 0o600))
	return kubeconfig, config
}

func startAgentProc(t testing.TB, bin, kubeconfig, config string) *agentProc {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), "agent-*.log")
	must(t, err)
	return &agentProc{cmd: nodeagenttest.StartAgentProcess(t, bin, config, kubeconfig, logf, 40*time.Second)}
}

// kill ends the agent with SIGKILL (no graceful shutdown) and reaps it.
func (p *agentProc) kill(t testing.TB) {
	t.Helper()
	must(t, p.cmd.Process.Kill())
	_ = p.cmd.Wait()
}

// waitDataPlane waits until node publishes a data plane endpoint different from prev.
func waitDataPlane(t testing.TB, node, prev string) string {
	t.Helper()
	var ep string
	eventually(t, 60*time.Second, "node "+node+" publishes a new data plane", func() (bool, string) {
		var wn wbv1.WorkbenchNode
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, &wn); err != nil {
			return false, err.Error()
		}
		if dp := wn.Status.DataPlane; dp != nil && dp.Endpoint != "" && dp.Endpoint != prev {
			ep = dp.Endpoint
			return true, ""
		}
		return false, fmt.Sprintf("%+v", wn.Status.DataPlane)
	})
	return ep
}

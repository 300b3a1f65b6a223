// Package aggregated benchmarks the attach round trip through the aggregated API
// (client → kube-apiserver → workbench-apiserver → node data plane → PTY and back) against
// the node data plane directly (client → node data plane → PTY), and that against the
// in-process floor (a PTY of /bin/cat written and read by this process), in the same run,
// samples interleaved, over two open WebSocket streams on two identical /bin/cat PTY
// sessions: one long-lived stream each, a keystroke line one frame each way.
//
//	KUBEBUILDER_ASSETS=$(hack/build-control-plane.sh path) go test ./test/bench/aggregated/ -run '^$' -bench AttachRoundTrip -benchtime 400x
package aggregated

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/apiserver"
	dpprotocol "sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/aggtest"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/testkit"
)

const nodeName = "node-bench"

var (
	env       *envtest.Env
	agg       *aggtest.Server
	workspace string
)

func TestMain(m *testing.M) {
	nodeagenttest.Main(m, nodeagenttest.Options{Name: "bench-agg", Env: envtest.Options{Aggregation: true},
		Setup: func(s *nodeagenttest.Suite) error {
			if _, err := aggtest.HostIP(); err != nil {
				return nodeagenttest.Skip(err.Error())
			}
			env, workspace = s.Env, s.Workspace
			var err error
			agg, err = aggtest.StartWithAgent(s, nodeName)
			return err
		}})
}

// must is the shared testkit.Must.
var must = testkit.Must

func ptr[T any](v T) *T { return &v }

// echoWatcher signals when a marker appears in the stream's output.
type echoWatcher struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	hit  chan struct{}
}

func (e *echoWatcher) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.buf.Write(p)
	if e.want != "" && strings.Contains(e.buf.String(), e.want) {
		e.want = ""
		e.buf.Reset()
		close(e.hit)
	}
	if e.buf.Len() > 1<<16 {
		e.buf.Reset()
	}
	return len(p), nil
}

func (e *echoWatcher) expect(s string) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.want, e.hit = s, make(chan struct{})
	e.buf.Reset()
	return e.hit
}

// attached is one open attach stream.
type attached struct {
	in  *io.PipeWriter
	out *echoWatcher
}

func attach(tb testing.TB, ctx context.Context, cfg *rest.Config, url string) *attached {
	exec, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, url)
	must(tb, err)
	inR, inW := io.Pipe()
	a := &attached{in: inW, out: &echoWatcher{}}
	go func() {
		_ = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: a.out, Tty: true})
	}()
	return a
}

// roundTrip types a unique line and waits for its echo.
func (a *attached) roundTrip(tb testing.TB, marker string) time.Duration {
	hit := a.out.expect(marker)
	start := time.Now()
	if _, err := io.WriteString(a.in, marker+"\n"); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-hit:
		return time.Since(start)
	case <-time.After(10 * time.Second):
		tb.Fatalf("no echo of %q within 10s", marker)
		return 0
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkAttachRoundTrip reports p50/p99 of both paths and their ratio.
func BenchmarkAttachRoundTrip(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	must(b, env.Client.Create(ctx, ns))
	dir, err := os.MkdirTemp(workspace, "b-")
	must(b, err)
	must(b, env.Client.Create(ctx, &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "cat", Namespace: ns.Name}, Spec: wbv1.CommandProfileSpec{
		Executable: "/bin/cat", AllowedRoots: []string{"repo"}, PTY: "Allowed", MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20,
		Env: wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}}}}}))
	must(b, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns.Name}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(dir)}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName}}}))
	for _, n := range []string{"direct", "agg", "wb"} {
		must(b, env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns.Name}, Spec: wbv1.TerminalSessionSpec{
			EnvironmentRef: "e", ShellProfileRef: ptr(wbv1.ObjectName("cat")), RawInput: wbv1.RawInputOperatorOnly}}))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var d, a, w wbv1.TerminalSession
		must(b, env.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "direct"}, &d))
		must(b, env.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "agg"}, &a))
		must(b, env.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "wb"}, &w))
		if d.Status.Phase == wbv1.SessionRunning && a.Status.Phase == wbv1.SessionRunning && w.Status.Phase == wbv1.SessionRunning {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("sessions not running: %+v %+v", d.Status, a.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The operator: a ServiceAccount with a token for kube-apiserver and one for the data
	// plane's audience (the direct path).
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: ns.Name}}
	must(b, env.Client.Create(ctx, sa))
	must(b, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: ns.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "op", Namespace: ns.Name}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "workbench-operator"}}))
	must(b, env.WaitAuthorized(ctx, "system:serviceaccount:"+ns.Name+":op", ns.Name))
	token := func(aud ...string) string {
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600)), Audiences: aud}}
		must(b, env.Client.SubResource("token").Create(ctx, sa, tr))
		return tr.Status.Token
	}
	kubeCfg := rest.AnonymousClientConfig(env.Config)
	kubeCfg.BearerToken = token()
	// The agent publishes its WorkbenchNode (data-plane endpoint and CA) on its own schedule:
	// wait for it, bounded.
	var node wbv1.WorkbenchNode
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) { // benchmark set-up only
		err := env.Client.Get(ctx, client.ObjectKey{Name: nodeName}, &node)
		if err == nil && node.Status.DataPlane != nil && node.Status.DataPlane.Endpoint != "" {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("WorkbenchNode %s with a data plane not published within 2m: %v", nodeName, err)
		}
	}
	directCfg := &rest.Config{Host: node.Status.DataPlane.Endpoint, BearerToken: token(agent.DataPlaneAudience()),
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(node.Status.DataPlane.CABundle)}}

	q := "?stdin=true&stdout=true&tty=true"
	direct := attach(b, ctx, directCfg, node.Status.DataPlane.Endpoint+dpprotocol.V2Path(ns.Name, "terminalsessions", "direct", "attach")+q)
	aggr := attach(b, ctx, kubeCfg, strings.TrimSuffix(kubeCfg.Host, "/")+"/apis/"+apiserver.GroupName+"/"+apiserver.Version+
		"/namespaces/"+ns.Name+"/terminalsessions/agg/attach"+q)
	// The breakdown: client → workbench-apiserver directly (as kube-apiserver's front proxy:
	// its client certificate and the X-Remote-* identity headers) → node data plane.
	fpDir := b.TempDir()
	fpCert, fpKey, err := env.Aggregation.FrontProxyCA.IssueFiles(fpDir, "bench-front-proxy", envtest.FrontProxyClientName)
	must(b, err)
	user := "system:serviceaccount:" + ns.Name + ":op"
	wbCfg := &rest.Config{Host: "https://" + agg.Addr, TLSClientConfig: rest.TLSClientConfig{CertFile: fpCert, KeyFile: fpKey, CAData: agg.ServingCA.CertPEM},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				r = r.Clone(r.Context())
				r.Header.Set("X-Remote-User", user)
				r.Header["X-Remote-Group"] = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns.Name, "system:authenticated"}
				return rt.RoundTrip(r)
			})
		}}
	wbOnly := attach(b, ctx, wbCfg, wbCfg.Host+"/apis/"+apiserver.GroupName+"/"+apiserver.Version+
		"/namespaces/"+ns.Name+"/terminalsessions/wb/attach"+q)
	// Warm up every path (connections, caches) before measuring.
	for i := range 20 {
		direct.roundTrip(b, fmt.Sprintf("warm-d-%d", i))
		aggr.roundTrip(b, fmt.Sprintf("warm-a-%d", i))
		wbOnly.roundTrip(b, fmt.Sprintf("warm-w-%d", i))
	}
	floor := startFloor(b)
	defer floor.close()
	for i := range 20 {
		floor.roundTrip(b, fmt.Sprintf("warm-f-%d", i))
	}
	var fs, ds, as, ws []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fs = append(fs, floor.roundTrip(b, fmt.Sprintf("f%07d", i)))
		ds = append(ds, direct.roundTrip(b, fmt.Sprintf("d%07d", i)))
		as = append(as, aggr.roundTrip(b, fmt.Sprintf("a%07d", i)))
		ws = append(ws, wbOnly.roundTrip(b, fmt.Sprintf("w%07d", i)))
	}
	b.StopTimer()
	fp50 := percentile(fs, 0.50)
	dp50, dp99 := percentile(ds, 0.50), percentile(ds, 0.99)
	ap50, ap99 := percentile(as, 0.50), percentile(as, 0.99)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(dp50), "direct-p50-µs")
	b.ReportMetric(us(dp99), "direct-p99-µs")
	b.ReportMetric(us(ap50), "aggregated-p50-µs")
	b.ReportMetric(us(ap99), "aggregated-p99-µs")
	b.ReportMetric(float64(ap50)/float64(dp50), "p50-ratio")
	b.ReportMetric(float64(ap99)/float64(dp99), "p99-ratio")
	b.ReportMetric(us(fp50), "floor-p50-µs")
	b.ReportMetric(float64(dp50)/float64(fp50), "direct/floor-p50")
	wp50 := percentile(ws, 0.50)
	b.ReportMetric(us(wp50), "wbapiserver-only-p50-µs")
	b.Logf("breakdown: client → workbench-apiserver → node p50 %s p99 %s (%.2f× direct): workbench-apiserver's hop %s, kube-apiserver's hop %s at p50",
		wp50, percentile(ws, 0.99), float64(wp50)/float64(dp50), wp50-dp50, ap50-wp50)
	b.Logf("attach round trip over %d interleaved samples: in-process floor p50 %s p99 %s; direct p50 %s p99 %s (%.2f× the floor); "+
		"aggregated p50 %s p99 %s; ratio aggregated/direct p50 %.2f p99 %.2f",
		len(ds), fp50, percentile(fs, 0.99), dp50, dp99, float64(dp50)/float64(fp50), ap50, ap99, float64(ap50)/float64(dp50), float64(ap99)/float64(dp99))
}

// floorPTY is the in-process floor: this process writes a line to a PTY running /bin/cat
// and reads until its echo (no sandbox, no ring, no network).
type floorPTY struct {
	f   *os.File
	cmd *exec.Cmd
	buf []byte
}

func startFloor(tb testing.TB) *floorPTY {
	cmd := exec.Command("/bin/cat")
	f, err := pty.Start(cmd)
	must(tb, err)
	return &floorPTY{f: f, cmd: cmd, buf: make([]byte, 4096)}
}

func (p *floorPTY) roundTrip(tb testing.TB, marker string) time.Duration {
	start := time.Now()
	if _, err := io.WriteString(p.f, marker+"\n"); err != nil {
		tb.Fatal(err)
	}
	var seen []byte
	for !bytes.Contains(seen, []byte(marker)) {
		n, err := p.f.Read(p.buf)
		if err != nil {
			tb.Fatal(err)
		}
		seen = append(seen, p.buf[:n]...)
	}
	d := time.Since(start)
	// Drain cat's copy of the line so the next sample starts clean.
	for !bytes.Contains(seen[bytes.Index(seen, []byte(marker))+len(marker):], []byte(marker)) {
		n, err := p.f.Read(p.buf)
		if err != nil {
			tb.Fatal(err)
		}
		seen = append(seen, p.buf[:n]...)
	}
	return d
}

func (p *floorPTY) close() {
	_ = p.f.Close()
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

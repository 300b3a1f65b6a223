// Package aggregated tests the aggregated subresource API end to end: a real kube-apiserver
// started with the front-proxy flags and an audit log, the manager, a real node agent (PTYs,
// processes) whose data plane trusts only workbench-apiserver's client certificate for
// identity forwarding, and workbench-apiserver in-process, registered with an APIService.
// Every call goes through kube-apiserver, as a user's would.
package aggregated

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/dataplane"
	"sensorium.dev/workbench/internal/test/aggtest"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/testkit"
)

const nodeName = "node-agg"

// RequestTimeout is kube-apiserver's --request-timeout in this suite (60 s by default):
// short, so that a test sees plain-HTTP streams cut by it and resumed.
const RequestTimeout = 10 * time.Second

var (
	env       *envtest.Env
	agg       *aggtest.Server
	workspace string
)

func TestMain(m *testing.M) {
	nodeagenttest.Main(m, nodeagenttest.Options{Name: "aggregated", Env: envtest.Options{Aggregation: true, RequestTimeout: RequestTimeout},
		Setup: func(s *nodeagenttest.Suite) error {
			if _, err := aggtest.HostIP(); err != nil {
				return nodeagenttest.Skip(err.Error())
			}
			env, workspace = s.Env, s.Workspace
			// Open attach streams re-check their authorization every 2 s here (30 s by default).
			dataplane.AttachAuthorizationRecheck = 2 * time.Second
			var err error
			if agg, err = aggtest.StartWithAgent(s, nodeName); err != nil {
				return err
			}
			// The forwarder finds the node's data plane in its WorkbenchNode: wait until published.
			_, err = nodeagenttest.WaitDataPlane(s.Ctx, env, nodeName, 60*time.Second)
			return err
		}})
}

var must = testkit.Must

func ptr[T any](v T) *T { return &v }

var eventually = testkit.Eventually

func namespace(t testing.TB) string { return env.Namespace(t, "agg-") }

// user binds role to a fresh user in ns and returns a rest config acting as that user
// through kube-apiserver (impersonation: kube-apiserver authenticates the admin, then
// authorizes and audits the user).
func user(t testing.TB, ns, name, role string) *rest.Config {
	t.Helper()
	must(t, env.Bind(context.Background(), role, name, ns))
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name}
	return cfg
}

// readyEnvironment creates a host-local environment over a fresh directory and a session
// running shell profile prof (nil: a structured session), and waits until both run.
func readyEnvironment(t testing.TB, ns string, sessions ...*wbv1.TerminalSession) string {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp(workspace, "t-")
	must(t, err)
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(dir)}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
	}}))
	for _, s := range sessions {
		s.Namespace = ns
		s.Spec.EnvironmentRef = "e"
		must(t, env.Client.Create(ctx, s))
	}
	names := make([]string, len(sessions))
	for i, s := range sessions {
		names[i] = s.Name
	}
	eventually(t, 60*time.Second, "environment Ready and sessions Running", func() (bool, string) {
		return kstate.ReadyAndAllRunning(t, env.Client, ns, "e", names...)
	})
	return dir
}

// exportDir makes a ready environment with structured session s whose root holds
// out/file with content, and returns the root's directory.
func exportDir(t testing.TB, ns, file, content string) string {
	t.Helper()
	dir := readyEnvironment(t, ns, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
	must(t, os.MkdirAll(dir+"/out", 0o755))
	must(t, os.WriteFile(dir+"/out/"+file, []byte(content), 0o644))
	return dir
}

// artifact is Artifact ns/name of environment e on the suite's node.
func artifact(ns, name string, spec wbv1.ArtifactSpec) *wbv1.Artifact {
	spec.EnvironmentRef = "e"
	return &wbv1.Artifact{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{wbv1.NodeLabel: nodeName}}, Spec: spec}
}

// exportSpec exports root repo's out directory, classified class ("" the default).
func exportSpec(class wbv1.Classification) wbv1.ArtifactSpec {
	return wbv1.ArtifactSpec{Source: "export", Root: ptr(wbv1.RootName("repo")), Path: ptr(wbv1.RelativePath("out")), Classification: class}
}

// waitStored waits until artifact ns/name's blob is stored and returns the artifact.
func waitStored(t testing.TB, ns, name string) *wbv1.Artifact {
	t.Helper()
	return kstate.Until(t, env.Client, 30*time.Second, "artifact "+name+" stored", ns, name, &wbv1.Artifact{},
		func(a *wbv1.Artifact) bool { return a.Status.Digest != "" })
}

// profile is a CommandProfile for exe.
func profile(ns, name, exe string, mut ...func(*wbv1.CommandProfileSpec)) *wbv1.CommandProfile {
	p := &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: exe, AllowedArgPrefixes: []string{""}, AllowedRoots: []string{"repo"},
		Env:               wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "LANG", Value: "C.UTF-8"}, {Name: "PATH", Value: "/usr/bin:/bin"}}},
		MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20,
	}}
	for _, m := range mut {
		m(&p.Spec)
	}
	return p
}

// dataPlaneClient trusts the node's published CA and presents no client certificate.
func dataPlaneClient(t testing.TB, node *wbv1.WorkbenchNode) *http.Client {
	t.Helper()
	if node.Status.DataPlane == nil {
		t.Fatal("the node publishes no data plane")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(node.Status.DataPlane.CABundle)) {
		t.Fatal("the published CA bundle holds no certificate")
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

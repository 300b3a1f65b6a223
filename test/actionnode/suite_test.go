// Package actionnode runs ActionRuns of every class (seed 002, C1..C7) through a real API
// server and a real node agent (real sandboxes, tmpfs areas, the egress proxy in the
// sandbox's network namespace, a local HTTPS endpoint), the node half of issue 10.
//
// The manager (controllers and webhooks) admits the runs; the node re-verifies and runs
// them.
package actionnode

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/testkit"
)

const nodeName = "node-actions"

var (
	env       *envtest.Env
	workspace string // admitted root "work"
	scripts   string // a script root outside the workspace
	signerKey ed25519.PrivateKey
	https     *endpoint
)

func TestMain(m *testing.M) {
	nodeagenttest.Main(m, nodeagenttest.Options{Name: "actionnode", Setup: setupSuite})
}

func setupSuite(s *nodeagenttest.Suite) error {
	for _, p := range []string{"/usr/bin/curl", "/usr/bin/getent"} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("the action node suite drives %s inside sandboxes: %w", p, err)
		}
	}
	env, workspace, scripts = s.Env, s.Workspace, filepath.Join(s.Dir, "scripts")
	if err := os.MkdirAll(scripts, 0o755); err != nil {
		return err
	}
	var err error
	if https, err = startEndpoint(workspace); err != nil {
		return err
	}
	s.Defer(https.srv.Close)
	if _, err := s.StartAgent(s.AgentConfig(nodeName), agent.Options{}); err != nil {
		return err
	}
	pub, seed, err := actions.GenerateKey()
	if err != nil {
		return err
	}
	if signerKey, err = actions.ParsePrivateKey(seed); err != nil {
		return err
	}
	return env.Client.Create(s.Ctx, &wbv1.ActionSigner{ObjectMeta: metav1.ObjectMeta{Name: "ops"}, Spec: wbv1.ActionSignerSpec{
		PublicKey: pub, Namespaces: []string{"*"},
		Classes: []wbv1.ActionClass{"C1", "C2", "C3", "C4", "C5", "C6", "C7"}}})
}

// endpoint is an HTTPS server on this machine's loopback with a certificate for
// "localhost"; its CA file lives in the workspace (readable by runs).
type endpoint struct {
	srv    *httptest.Server
	port   int
	caFile string
}

const bigSize = 1 << 20

func startEndpoint(dir string) (*endpoint, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello from the endpoint") })
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(bigSize))
		_, _ = w.Write(make([]byte, bigSize))
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	return &endpoint{srv: srv, port: port, caFile: ca}, nil
}

var must = testkit.Must

var eventually = testkit.Eventually

// setup creates a namespace with an Environment "e" on the node rooted at a fresh
// directory of the workspace (root "repo"), ready.
func setup(t *testing.T) (string, string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "an-"}}
	must(t, env.Client.Create(ctx, ns))
	dir, err := os.MkdirTemp(workspace, "repo-")
	must(t, err)
	must(t, os.Chmod(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "input.txt"), []byte("workspace input\n"), 0o644))
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns.Name}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: &dir}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
	}}))
	kstate.Until(t, env.Client, 30*time.Second, "environment Ready", ns.Name, "e", &wbv1.Environment{},
		func(e *wbv1.Environment) bool {
			return e.Status.Phase == wbv1.EnvironmentReady
		})
	// The manager admits a run only on a node that publishes its class Available.
	eventually(t, 30*time.Second, "WorkbenchNode with action classes", func() (bool, string) {
		var wn wbv1.WorkbenchNode
		err := env.Client.Get(ctx, client.ObjectKey{Name: nodeName}, &wn)
		return err == nil && len(wn.Status.ActionClasses) == 7, fmt.Sprintf("%v %+v", err, wn.Status.ActionClasses)
	})
	return ns.Name, dir
}

// catalog creates and signs a catalog of decls.
func catalog(t *testing.T, ns, name string, decls ...wbv1.ActionDeclaration) *wbv1.ActionCatalog {
	t.Helper()
	ctx := context.Background()
	cat := &wbv1.ActionCatalog{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.ActionCatalogSpec{Actions: decls}}
	must(t, env.Client.Create(ctx, cat))
	sign(t, cat)
	return cat
}

func sign(t *testing.T, cat *wbv1.ActionCatalog) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(cat), cat); err != nil {
			return err
		}
		raw, err := json.Marshal(&cat.Spec)
		if err != nil {
			return err
		}
		digest, err := actions.SpecDigestJSON(raw)
		if err != nil {
			return err
		}
		sig, err := actions.Sign(signerKey, digest)
		if err != nil {
			return err
		}
		cat.Signature = &wbv1.CatalogSignature{SignerRef: "ops", SpecDigest: wbv1.Digest(digest), Value: sig}
		return env.Client.Update(context.Background(), cat)
	}))
}

// decl is a declaration with the common fields set.
func decl(id string, class wbv1.ActionClass, ex wbv1.ActionExecutable, argv ...string) wbv1.ActionDeclaration {
	return wbv1.ActionDeclaration{ID: id, Class: class, Executable: ex, ArgvTemplate: argv,
		DefaultTimeoutSeconds: 30, MaxTimeoutSeconds: 60, OutputLimits: wbv1.OutputLimits{StdoutBytes: 64 << 10, StderrBytes: 16 << 10},
		ResultContract: wbv1.ResultContract{StdoutFormat: wbv1.StdoutText}}
}

// perl declares a Perl script (written to the script root) run by /usr/bin/perl: the
// catalog core refuses shells and inline code, so every test program is a script file.
func perl(t *testing.T, ns, id string, class wbv1.ActionClass, code string) wbv1.ActionDeclaration {
	t.Helper()
	path := filepath.Join(scripts, ns+"-"+id+".pl")
	must(t, os.WriteFile(path, []byte("use strict; use warnings;\n"+code+"\n"), 0o644))
	argv := []string{"perl", path}
	if class == "C2" {
		argv = append(argv, "--params-json", "{{params_json}}")
	}
	d := decl(id, class, wbv1.ActionExecutable{Kind: wbv1.ExecutableScript, Path: path, Interpreter: "/usr/bin/perl"}, argv...)
	d.Script = &wbv1.ScriptParams{AllowedRoots: []string{scripts}}
	return d
}

// start creates a run of action id; the manager admits it (the core decides, the run gets
// the node label) and the node runs it.
func start(t *testing.T, ns, catName, name, id string, params map[string]any) *wbv1.ActionRun {
	t.Helper()
	run := &wbv1.ActionRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: wbv1.ActionRunSpec{CatalogRef: wbv1.ObjectName(catName), ActionID: id, EnvironmentRef: "e"}}
	if params != nil {
		raw, err := json.Marshal(params)
		must(t, err)
		run.Spec.Parameters = &apiextensionsv1.JSON{Raw: raw}
	}
	must(t, env.Client.Create(context.Background(), run))
	return run
}

// final waits for the node's one recorded outcome.
func final(t *testing.T, ns, name string) *wbv1.ActionRun {
	t.Helper()
	r := kstate.Until(t, env.Client, 90*time.Second, "action run "+name+" outcome", ns, name, &wbv1.ActionRun{},
		func(r *wbv1.ActionRun) bool {
			return wbv1.ActionRunIsFinal(r.Status.Conditions)
		})
	t.Logf("%s: completed %s, refusal %+v, exit %v, stdout %q, touched %+v, transcript %+v, artifacts %+v",
		name, reason(r), r.Status.Refusal, deref(r.Status.ExitCode), r.Status.Stdout, r.Status.TouchedFiles, r.Status.NetworkTranscript, r.Status.ArtifactRefs)
	return r
}

func reason(r *wbv1.ActionRun) string {
	if c := meta.FindStatusCondition(r.Status.Conditions, wbv1.ConditionCompleted); c != nil {
		return c.Reason
	}
	return ""
}

func deref(p *int32) any {
	if p == nil {
		return nil
	}
	return *p
}

func refusalCode(r *wbv1.ActionRun) string {
	if r.Status.Refusal == nil {
		return ""
	}
	return r.Status.Refusal.Code
}

func succeeded(t *testing.T, r *wbv1.ActionRun) {
	t.Helper()
	if reason(r) != string(wbv1.ActionRunSucceeded) || r.Status.ExitCode == nil || *r.Status.ExitCode != 0 || r.Status.Refusal != nil {
		t.Fatalf("run %s: completed %q exit %v refusal %+v stdout %q", r.Name, reason(r), deref(r.Status.ExitCode), r.Status.Refusal, r.Status.Stdout)
	}
}

func contains(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s %q lacks %q", what, got, w)
		}
	}
}

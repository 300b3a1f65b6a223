package actions

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/test/aggtest"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/internal/test/testkit"
	wbclient "sensorium.dev/workbench/pkg/client"
)

func keyOf(o client.Object) client.ObjectKey { return client.ObjectKeyFromObject(o) }

var must = testkit.Must

func ptr[T any](v T) *T { return &v }

var mustRefuse = testkit.MustRefuse

// testKey derives a fixed Ed25519 key from a name.
func testKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("actions-test/" + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

var schema = `{"type":"object","required":["msg"],"properties":{"msg":{"type":"string","maxLength":64}},"additionalProperties":false}`

func declaration(id string, class wbv1.ActionClass) wbv1.ActionDeclaration {
	d := wbv1.ActionDeclaration{
		ID: id, Class: class,
		Executable:            wbv1.ActionExecutable{Kind: wbv1.ExecutableBinary, Path: "/usr/bin/printf"},
		ArgvTemplate:          []string{"printf", "%s\\n", "{{msg}}"},
		ParametersSchema:      &apiextensionsv1.JSON{Raw: []byte(schema)},
		DefaultTimeoutSeconds: 10, MaxTimeoutSeconds: 60,
		OutputLimits:   wbv1.OutputLimits{StdoutBytes: 4096, StderrBytes: 4096},
		ResultContract: wbv1.ResultContract{StdoutFormat: wbv1.StdoutText},
	}
	if class == wbv1.ActionClassScopedFSWrite {
		d.Executable.Path = "/usr/bin/tee"
		d.ArgvTemplate = []string{"tee", "{{msg}}"}
		d.FSWrite = &wbv1.FSWriteParams{WriteRoot: wbv1.CwdAddress{Root: "repo", Path: "out"}, MaxBytesTotal: 1 << 20, MaxBytesPerFile: 1 << 16}
		d.WorkingDirectory = &wbv1.CwdAddress{Root: "repo", Path: "out"}
	}
	return d
}

// fixture is one namespace with a placed environment "e", a node publishing every class,
// a signer trusted for the namespace, and an unsigned catalog "tools" (C1 echo, C3 write,
// C7 gated).
type fixture struct {
	ns, node, signer string
	key              ed25519.PrivateKey
}

func newFixture(t *testing.T, classes ...wbv1.ActionClass) *fixture {
	t.Helper()
	ctx := context.Background()
	ns := namespace(t)
	f := &fixture{ns: ns, node: "node-" + ns, signer: "signer-" + ns, key: testKey(ns)}
	if len(classes) == 0 {
		classes = []wbv1.ActionClass{"C1", "C2", "C3", "C4", "C5", "C6", "C7"}
	}
	wn := &wbv1.WorkbenchNode{ObjectMeta: metav1.ObjectMeta{Name: f.node}}
	must(t, env.Client.Create(ctx, wn))
	for _, c := range classes {
		wn.Status.ActionClasses = append(wn.Status.ActionClasses, wbv1.ActionClassSupport{Class: c, Availability: wbv1.ActionAvailable})
	}
	wn.Status.HeartbeatTime = &metav1.Time{Time: time.Now()}
	must(t, env.Client.Status().Update(ctx, wn))
	must(t, env.Client.Create(ctx, hostLocalCapability(f.node)))
	must(t, env.Client.Create(ctx, &wbv1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns},
		Spec: wbv1.EnvironmentSpec{Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr("/srv/work/" + ns)}},
			NodeSelector: map[string]string{"actions-test/node": f.node}},
	}))
	f.addSigner(t, f.signer, []string{ns}, []wbv1.ActionClass{"C1", "C2", "C3", "C4", "C5", "C6", "C7"})
	must(t, env.Client.Create(ctx, &wbv1.ActionCatalog{
		ObjectMeta: metav1.ObjectMeta{Name: "tools", Namespace: ns},
		Spec: wbv1.ActionCatalogSpec{Actions: []wbv1.ActionDeclaration{
			declaration("node.echo", wbv1.ActionClassReadOnlySpawn),
			declaration("node.write", wbv1.ActionClassScopedFSWrite),
			declaration("node.gated", wbv1.ActionClassOperatorGated),
		}},
	}))
	kstate.Until(t, env.Client, 20*time.Second, "environment e placed on "+f.node, ns, "e", &wbv1.Environment{},
		func(e *wbv1.Environment) bool { return e.Status.NodeName == f.node })
	return f
}

// signedFixture is newFixture with catalog "tools" signed by the fixture's trusted signer.
func signedFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	f.sign(t, f.signer)
	return f
}

func (f *fixture) addSigner(t *testing.T, name string, namespaces []string, classes []wbv1.ActionClass) {
	t.Helper()
	s := &wbv1.ActionSigner{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: wbv1.ActionSignerSpec{PublicKey: actions.PublicKeyOf(f.key), Namespaces: namespaces, Classes: classes}}
	must(t, env.Client.Create(context.Background(), s))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
}

func (f *fixture) client(t *testing.T) *wbclient.Client {
	t.Helper()
	c, err := wbclient.New(env.Config, f.ns)
	must(t, err)
	return c
}

// sign signs catalog "tools" as signer with the fixture's key (pkg/client, as the CLI).
func (f *fixture) sign(t *testing.T, signer string) *wbv1.ActionCatalog {
	t.Helper()
	cat, err := f.client(t).SignCatalog(context.Background(), "tools", signer, f.key, metav1.Now())
	must(t, err)
	return cat
}

func (f *fixture) run(name, action string, params string) *wbv1.ActionRun {
	r := &wbv1.ActionRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: wbv1.ActionRunSpec{CatalogRef: "tools", ActionID: action, EnvironmentRef: "e"}}
	if params != "" {
		r.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(params)}
	}
	return r
}

func (f *fixture) getRun(t *testing.T, name string) *wbv1.ActionRun {
	t.Helper()
	return kstate.Get(t, env.Client, f.ns, name, &wbv1.ActionRun{})
}

// consentRequest reads the ConsentRequest run r names.
func (f *fixture) consentRequest(t *testing.T, r *wbv1.ActionRun) *wbv1.ConsentRequest {
	t.Helper()
	return kstate.Get(t, env.Client, f.ns, r.Status.ConsentRequestRef, &wbv1.ConsentRequest{})
}

func (f *fixture) waitRun(t *testing.T, name string, what string, ok func(*wbv1.ActionRun) bool) *wbv1.ActionRun {
	t.Helper()
	var r *wbv1.ActionRun
	eventually(t, 30*time.Second, "run "+name+" "+what, func() (bool, string) {
		r = f.getRun(t, name)
		return ok(r), fmt.Sprintf("phase=%s refusal=%+v labels=%v conditions=%+v", r.Status.Phase, r.Status.Refusal, r.Labels, r.Status.Conditions)
	})
	return r
}

// awaitingConsent waits until run name is held AwaitingConsent with its ConsentRequest
// named, and returns it.
func (f *fixture) awaitingConsent(t *testing.T, name string) *wbv1.ActionRun {
	t.Helper()
	return f.waitRun(t, name, "awaiting consent", func(r *wbv1.ActionRun) bool {
		return r.Status.Phase == wbv1.ActionRunAwaitingConsent && r.Status.ConsentRequestRef != ""
	})
}

// askConsent creates a run of the operator-gated action node.gated with params and waits
// until it is held for consent.
func (f *fixture) askConsent(t *testing.T, name, params string) *wbv1.ActionRun {
	t.Helper()
	must(t, env.Client.Create(context.Background(), f.run(name, "node.gated", params)))
	return f.awaitingConsent(t, name)
}

func admitted(r *wbv1.ActionRun) bool {
	return meta(r.Status.Conditions, wbv1.ConditionAdmitted) == metav1.ConditionTrue
}

func meta(conds []metav1.Condition, t string) metav1.ConditionStatus {
	for _, c := range conds {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func (f *fixture) catalog(t *testing.T) *wbv1.ActionCatalog {
	t.Helper()
	var c wbv1.ActionCatalog
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "tools"}, &c))
	return &c
}

// setPolicy writes the WorkbenchPolicy singleton and restores "absent" after the test.
func setPolicy(t *testing.T, spec wbv1.WorkbenchPolicySpec) {
	t.Helper()
	ctx := context.Background()
	p := &wbv1.WorkbenchPolicy{ObjectMeta: metav1.ObjectMeta{Name: wbv1.WorkbenchPolicyName}}
	err := env.Client.Get(ctx, keyOf(p), p)
	switch {
	case apierrors.IsNotFound(err):
		p.Spec = spec
		must(t, env.Client.Create(ctx, p))
	case err != nil:
		t.Fatal(err)
	default:
		p.Spec = spec
		must(t, env.Client.Update(ctx, p))
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &wbv1.WorkbenchPolicy{ObjectMeta: metav1.ObjectMeta{Name: wbv1.WorkbenchPolicyName}})
	})
}

// kubeconfig writes the admin kubeconfig for the CLI.
func kubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, aggtest.Kubeconfig(env.Config, p))
	return p
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	must(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// hostLocalCapability is what a node agent attests for host-local on node, labelled with
// the node for this suite's clean-up.
func hostLocalCapability(node string) *wbv1.BackendCapability {
	c := envtest.HostLocalCapability(node)
	c.Labels = map[string]string{"actions-test/node": node}
	return c
}

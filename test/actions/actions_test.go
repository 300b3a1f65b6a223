package actions

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"k8s.io/client-go/util/retry"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/cli"
)

func kw(t *testing.T, ns string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	full := append([]string{"--kubeconfig", kubeconfig(t), "-n", ns}, args...)
	code := cli.Main(full, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return code, out.String(), errOut.String()
}

// TestCLISignedCatalogAdmitsRun: `kubectl workbench catalog sign` authorizes the catalog;
// `action run` creates a run the manager admits, renders and binds to the node; `catalog
// verify` agrees. A run of the unsigned catalog was refused before.
func TestCLISignedCatalogAdmitsRun(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	mustRefuse(t, env.Client.Create(ctx, f.run("early", "node.echo", `{"msg":"hi"}`)), "action-catalog-unauthorized")

	keyFile := writeFile(t, "key", base64.StdEncoding.EncodeToString(f.key.Seed())+"\n")
	if code, out, errOut := kw(t, f.ns, "catalog", "sign", "tools", "--key", keyFile, "--signer", f.signer); code != 0 {
		t.Fatalf("catalog sign exited %d: %s %s", code, out, errOut)
	}
	eventually(t, 20e9, "catalog Authorized with per-action status", func() (bool, string) {
		c := f.catalog(t)
		ok := c.Status.Authorization == wbv1.ActionAuthorized && c.Status.Signer == f.signer && len(c.Status.Actions) == 3
		for _, a := range c.Status.Actions {
			ok = ok && a.Authorization == wbv1.ActionAuthorized && a.Availability == wbv1.ActionAvailable
		}
		return ok, string(c.Status.Authorization) + " " + string(c.Status.SpecDigest)
	})
	if code, out, errOut := kw(t, f.ns, "catalog", "verify", "tools"); code != 0 || !strings.Contains(out, "Authorized") {
		t.Fatalf("catalog verify exited %d: %s %s", code, out, errOut)
	}
	code, out, errOut := kw(t, f.ns, "-o", "json", "action", "run", "tools", "node.echo", "--env", "e", "--param", "msg=hello world", "--wait=false")
	if code != 0 {
		t.Fatalf("action run exited %d: %s %s", code, out, errOut)
	}
	var created wbv1.ActionRun
	must(t, json.Unmarshal([]byte(out), &created))
	name := created.Name
	r := f.waitRun(t, name, "admitted", admitted)
	if r.Labels[wbv1.NodeLabel] != f.node || r.Labels[wbv1.EnvironmentLabel] != "e" {
		t.Fatalf("run not bound to the environment's node: %v", r.Labels)
	}
	if got := strings.Join(r.Status.Argv, "|"); got != `printf|%s\n|hello world` {
		t.Fatalf("rendered argv %q", got)
	}
	if r.Status.Class != "C1" || r.Status.Signer != f.signer || r.Status.Unauthorized || r.Status.SpecDigest != f.catalog(t).Status.SpecDigest || r.Status.TimeoutSeconds != 10 {
		t.Fatalf("admission fields: %+v", r.Status)
	}
	if r.Status.Phase != wbv1.ActionRunPending {
		t.Fatalf("an admitted run waits for its node: phase %s", r.Status.Phase)
	}
	// Parameters are checked at admission with the schema.
	mustRefuse(t, env.Client.Create(ctx, f.run("bad-params", "node.echo", `{"msg":"x","extra":1}`)), "parameters-invalid")
	mustRefuse(t, env.Client.Create(ctx, f.run("policy-params", "node.echo", `{"msg":"x","host_policy":{}}`)), "host-policy-request-forbidden")
	mustRefuse(t, env.Client.Create(ctx, f.run("nope", "node.nope", `{"msg":"x"}`)), "action-not-allowlisted")
	missing := f.run("missing", "node.echo", `{"msg":"x"}`)
	missing.Spec.CatalogRef = "absent"
	mustRefuse(t, env.Client.Create(ctx, missing), "catalog-entry-missing")
}

// TestCatalogEditedAfterSigning: a signed catalog whose spec changes is no longer
// authorized (status and admission say action-catalog-unauthorized), even under the
// Bootstrap policy; re-signing authorizes it again.
func TestCatalogEditedAfterSigning(t *testing.T) {
	ctx := context.Background()
	f := signedFixture(t)
	must(t, env.Client.Create(ctx, f.run("before", "node.echo", `{"msg":"a"}`)))
	f.waitRun(t, "before", "admitted", admitted)

	// A user's edit: read again when the manager's status write landed in between.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cat := f.catalog(t)
		cat.Spec.Actions[0].ArgvTemplate = []string{"printf", "{{msg}}"}
		return env.Client.Update(ctx, cat)
	}))
	eventually(t, 20e9, "catalog Unauthorized after the edit", func() (bool, string) {
		c := f.catalog(t)
		return c.Status.Authorization == wbv1.ActionUnauthorized && c.Status.Actions[0].Code == "action-catalog-unauthorized", string(c.Status.Authorization)
	})
	mustRefuse(t, env.Client.Create(ctx, f.run("after", "node.echo", `{"msg":"a"}`)), "action-catalog-unauthorized")
	setPolicy(t, wbv1.WorkbenchPolicySpec{Posture: wbv1.PostureNormal, SignaturePolicy: wbv1.SignatureBootstrap})
	mustRefuse(t, env.Client.Create(ctx, f.run("after-bootstrap", "node.echo", `{"msg":"a"}`)), "action-catalog-unauthorized")

	f.sign(t, f.signer)
	must(t, env.Client.Create(ctx, f.run("resigned", "node.echo", `{"msg":"a"}`)))
	f.waitRun(t, "resigned", "admitted", admitted)
}

// TestSignerScope: an unknown signer, a signer outside the catalog's namespace and a
// signer outside an action's class each refuse with their code.
func TestSignerScope(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.sign(t, "nobody-"+f.ns)
	mustRefuse(t, env.Client.Create(ctx, f.run("unknown", "node.echo", `{"msg":"a"}`)), "catalog-signer-unknown")

	f.addSigner(t, "elsewhere-"+f.ns, []string{"some-other-namespace"}, []wbv1.ActionClass{"C1"})
	f.sign(t, "elsewhere-"+f.ns)
	mustRefuse(t, env.Client.Create(ctx, f.run("outside", "node.echo", `{"msg":"a"}`)), "catalog-signer-out-of-scope")

	f.addSigner(t, "c1only-"+f.ns, []string{f.ns}, []wbv1.ActionClass{"C1"})
	f.sign(t, "c1only-"+f.ns)
	mustRefuse(t, env.Client.Create(ctx, f.run("class", "node.write", `{"msg":"a.txt"}`)), "catalog-signer-out-of-scope")
	must(t, env.Client.Create(ctx, f.run("c1", "node.echo", `{"msg":"a"}`)))
	f.waitRun(t, "c1", "admitted", admitted)
	eventually(t, 20e9, "per-action status by class", func() (bool, string) {
		c := f.catalog(t)
		if len(c.Status.Actions) != 3 {
			return false, "no actions"
		}
		return c.Status.Actions[0].Authorization == wbv1.ActionAuthorized && c.Status.Actions[1].Authorization == wbv1.ActionUnauthorized &&
			c.Status.Actions[1].Code == "catalog-signer-out-of-scope", c.Status.Actions[1].Code
	})
}

// TestEmergencyPosture: Emergency refuses C3 unless an exception names the action; C1
// still runs.
func TestEmergencyPosture(t *testing.T) {
	ctx := context.Background()
	f := signedFixture(t)
	setPolicy(t, wbv1.WorkbenchPolicySpec{Posture: wbv1.PostureEmergency, SignaturePolicy: wbv1.SignatureStrict})
	mustRefuse(t, env.Client.Create(ctx, f.run("write", "node.write", `{"msg":"a.txt"}`)), "emergency-policy-blocked")
	must(t, env.Client.Create(ctx, f.run("echo", "node.echo", `{"msg":"a"}`)))
	f.waitRun(t, "echo", "admitted", admitted)
	setPolicy(t, wbv1.WorkbenchPolicySpec{Posture: wbv1.PostureEmergency, SignaturePolicy: wbv1.SignatureStrict,
		EmergencyExceptions: []wbv1.EmergencyException{{Namespace: f.ns, CatalogRef: "tools", ActionID: "node.write"}}})
	must(t, env.Client.Create(ctx, f.run("write-excepted", "node.write", `{"msg":"a.txt"}`)))
	f.waitRun(t, "write-excepted", "admitted", admitted)
}

// TestBootstrapPolicy: an unsigned catalog runs under Bootstrap, every run marked
// unauthorized; Strict refuses it.
func TestBootstrapPolicy(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	mustRefuse(t, env.Client.Create(ctx, f.run("strict", "node.echo", `{"msg":"a"}`)), "action-catalog-unauthorized")
	setPolicy(t, wbv1.WorkbenchPolicySpec{Posture: wbv1.PostureNormal, SignaturePolicy: wbv1.SignatureBootstrap})
	must(t, env.Client.Create(ctx, f.run("boot", "node.echo", `{"msg":"a"}`)))
	r := f.waitRun(t, "boot", "admitted", admitted)
	if !r.Status.Unauthorized || r.Status.Signer != "" {
		t.Fatalf("a bootstrap run must be marked unauthorized: %+v", r.Status)
	}
}

// TestClassUnavailableOnNode: a node that does not publish C3 fails the run closed.
func TestClassUnavailableOnNode(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "C1")
	f.sign(t, f.signer)
	must(t, env.Client.Create(ctx, f.run("write", "node.write", `{"msg":"a.txt"}`)))
	r := f.waitRun(t, "write", "refused", func(r *wbv1.ActionRun) bool { return r.Status.Phase == wbv1.ActionRunRefused })
	if r.Status.Refusal == nil || r.Status.Refusal.Code != "action-class-unavailable" || r.Labels[wbv1.NodeLabel] != "" {
		t.Fatalf("want action-class-unavailable and no node binding: %+v %v", r.Status.Refusal, r.Labels)
	}
}

// TestCatalogStructureRefused: the webhook refuses structural errors with the seed's codes.
func TestCatalogStructureRefused(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cat := &wbv1.ActionCatalog{}
	cat.Name, cat.Namespace = "dup", ns
	cat.Spec.Actions = []wbv1.ActionDeclaration{declaration("a.b", "C1"), declaration("a.b", "C1")}
	mustRefuse(t, env.Client.Create(ctx, cat), "action-id-duplicate")
	cat.Spec.Actions = []wbv1.ActionDeclaration{declaration(" a.b", "C1")}
	mustRefuse(t, env.Client.Create(ctx, cat), "action-id-format-invalid")
	cat.Spec.Actions = []wbv1.ActionDeclaration{declaration("a.b", "C9")}
	mustRefuse(t, env.Client.Create(ctx, cat), "action-class-unknown")
	d := declaration("a.b", "C1")
	d.ArgvTemplate = []string{"sh", "-c", "{{msg}}"}
	cat.Spec.Actions = []wbv1.ActionDeclaration{d}
	mustRefuse(t, env.Client.Create(ctx, cat), "shell-string")
	d = declaration("a.b", "C1")
	d.Sensitivity = map[string]string{"override": "public"}
	cat.Spec.Actions = []wbv1.ActionDeclaration{d}
	mustRefuse(t, env.Client.Create(ctx, cat), "sensitivity-override-forbidden")
}

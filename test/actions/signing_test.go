package actions

import (
	"context"
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// editCatalog applies edit to catalog "tools", retrying on conflicts with the manager's
// status writes.
func (f *fixture) editCatalog(t *testing.T, edit func(*wbv1.ActionCatalog)) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cat := f.catalog(t)
		edit(cat)
		return env.Client.Update(context.Background(), cat)
	}))
}

// TestCatalogSigningBlock: seed 002's signing block. The signer it names must be the one
// whose signature authorizes the catalog: another signer trusted for the same namespace
// and classes leaves the action Unauthorized (signing-signer-mismatch, in status and at
// admission); once the named signer signs, a run may request signatures only in an
// allowed domain and at most maxSignatures (issue 30 item 6).
func TestCatalogSigningBlock(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.editCatalog(t, func(c *wbv1.ActionCatalog) {
		c.Spec.Actions[0].Signing = &wbv1.ActionSigning{SignerRef: f.signer, KeyKind: "primary-participant",
			AllowedDomains: []string{"git.commit.v1"}, MaxSignatures: 1}
	})
	other := "other-" + f.ns
	f.addSigner(t, other, []string{f.ns}, []wbv1.ActionClass{"C1", "C2", "C3", "C4", "C5", "C6", "C7"})
	f.sign(t, other)
	eventually(t, 20e9, "signing action Unauthorized under another signer", func() (bool, string) {
		c := f.catalog(t)
		if len(c.Status.Actions) != 3 {
			return false, "no actions"
		}
		return c.Status.Authorization == wbv1.ActionAuthorized && c.Status.Actions[0].Code == "signing-signer-mismatch" &&
				c.Status.Actions[0].Authorization == wbv1.ActionUnauthorized && c.Status.Actions[1].Authorization == wbv1.ActionAuthorized,
			fmt.Sprintf("%+v", c.Status.Actions)
	})
	mustRefuse(t, env.Client.Create(ctx, f.run("other-signer", "node.echo", `{"msg":"a"}`)), "signing-signer-mismatch")

	f.sign(t, f.signer)
	withSigning := func(name, domain string, n int32) *wbv1.ActionRun {
		r := f.run(name, "node.echo", `{"msg":"a"}`)
		r.Spec.Signing = &wbv1.SigningRequest{Domain: domain, Signatures: n}
		return r
	}
	mustRefuse(t, env.Client.Create(ctx, withSigning("two", "git.commit.v1", 2)), "signing-max-signatures-exceeded")
	mustRefuse(t, env.Client.Create(ctx, withSigning("tag", "git.tag.v1", 1)), "signing-domain-not-allowed")
	w := f.run("write", "node.write", `{"msg":"a.txt"}`)
	w.Spec.Signing = &wbv1.SigningRequest{Domain: "git.commit.v1", Signatures: 1}
	mustRefuse(t, env.Client.Create(ctx, w), "signing-domain-not-allowed")
	must(t, env.Client.Create(ctx, withSigning("one", "git.commit.v1", 1)))
	r := f.waitRun(t, "one", "admitted", admitted)
	if r.Status.Signer != f.signer {
		t.Fatalf("signer %q", r.Status.Signer)
	}
	must(t, env.Client.Create(ctx, f.run("plain", "node.echo", `{"msg":"a"}`)))
	f.waitRun(t, "plain", "admitted", admitted)
}

// TestActionRunObservation: each run records the seed's observation: the result
// contract's signal kind and family, the sensitivity class (baseline
// operational-sensitive, or the declared raise) and the incidental effects (class
// baseline plus declared) at admission; when the run completes, what it was observed to do
// (touched files) is added (issue 30 item 6).
func TestActionRunObservation(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.editCatalog(t, func(c *wbv1.ActionCatalog) {
		a := &c.Spec.Actions[0]
		a.ResultContract.SignalKind, a.ResultContract.SignalFamily = "os.echo", "os/echo-result"
		a.IncidentalEffects = []string{"terminal-bell"}
		c.Spec.Actions[1].Sensitivity = map[string]string{"class": "restricted"}
	})
	f.sign(t, f.signer)
	must(t, env.Client.Create(ctx, f.run("echo", "node.echo", `{"msg":"a"}`)))
	must(t, env.Client.Create(ctx, f.run("write", "node.write", `{"msg":"a.txt"}`)))
	echo := f.waitRun(t, "echo", "admitted", admitted)
	o := echo.Status.Observation
	if o == nil || o.SignalKind != "os.echo" || o.SignalFamily != "os/echo-result" || o.SensitivityClass != "operational-sensitive" ||
		!slices.Equal(o.IncidentalEffects, []string{"disk-access-timestamp-update", "terminal-bell"}) {
		t.Fatalf("C1 observation at admission: %+v", o)
	}
	wr := f.waitRun(t, "write", "admitted", admitted)
	if o := wr.Status.Observation; o == nil || o.SensitivityClass != "restricted" ||
		!slices.Equal(o.IncidentalEffects, []string{"disk-access-timestamp-update", "local-filesystem-write"}) {
		t.Fatalf("C3 observation at admission: %+v", o)
	}

	// The node's outcome (as the node agent writes it): the C1 run touched a file.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r := f.getRun(t, "echo")
		r.Status.TouchedFiles = []wbv1.TouchedFile{{Path: "x", Size: 1, Digest: wbv1.Digest("sha256:" + fmt.Sprintf("%064d", 0))}}
		r.Status.CompletionTime = &metav1.Time{Time: metav1.Now().Time}
		r.Status.Conditions = append(r.Status.Conditions, metav1.Condition{Type: wbv1.ConditionCompleted, Status: metav1.ConditionTrue,
			Reason: string(wbv1.ActionRunSucceeded), Message: "done", LastTransitionTime: metav1.Now(), ObservedGeneration: r.Generation})
		return env.Client.Status().Update(ctx, r)
	}))
	f.waitRun(t, "echo", "observation completed with the observed write", func(r *wbv1.ActionRun) bool {
		o := r.Status.Observation
		return o != nil && slices.Equal(o.IncidentalEffects, []string{"disk-access-timestamp-update", "local-filesystem-write", "terminal-bell"})
	})
}

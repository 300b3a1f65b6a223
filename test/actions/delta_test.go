package actions

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/controllers"
	"sensorium.dev/workbench/internal/test/envtest"
)

// never fails the test when the run was ever admitted or bound to a node.
func neverAdmitted(t *testing.T, r *wbv1.ActionRun) {
	t.Helper()
	if admitted(r) || r.Labels[wbv1.NodeLabel] != "" {
		t.Fatalf("run %s was admitted or bound: labels=%v conditions=%+v", r.Name, r.Labels, r.Status.Conditions)
	}
}

// TestAddToCatalog: an operator answering a C7 run's request with add-to-catalog refuses
// that run (action-catalog-unauthorized) and yields an unsigned catalog remembering the
// action as C1, named in status.catalogDeltaRef; a run against the proposal is refused at
// admission until a signer signs it, then admitted without a prompt.
func TestAddToCatalog(t *testing.T) {
	ctx := context.Background()
	f := signedFixture(t)
	op := env.BoundAs(t, "workbench-operator", "dave", f.ns)

	r := f.askConsent(t, "gated", `{"msg":"a"}`)
	cr := f.consentRequest(t, r)
	if !slices.Contains(cr.Spec.Options, wbv1.ConsentAddToCatalog) {
		t.Fatalf("options %v do not offer add-to-catalog", cr.Spec.Options)
	}
	must(t, op.Create(ctx, envtest.ConsentGrant(f.ns, "g-add", cr.Name, wbv1.ConsentAddToCatalog)))
	r = f.waitRun(t, "gated", "refused with a delta", func(r *wbv1.ActionRun) bool { return r.Status.Phase == wbv1.ActionRunRefused })
	if r.Status.Refusal == nil || r.Status.Refusal.Code != "action-catalog-unauthorized" || r.Status.CatalogDeltaRef == "" {
		t.Fatalf("refusal=%+v catalogDeltaRef=%q", r.Status.Refusal, r.Status.CatalogDeltaRef)
	}
	neverAdmitted(t, r)

	var delta wbv1.ActionCatalog
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: r.Status.CatalogDeltaRef}, &delta))
	if delta.Signature != nil || delta.Labels[controllers.DeltaOfLabel] != "tools" || delta.Labels[controllers.DeltaRunLabel] != "gated" {
		t.Fatalf("delta catalog: signature=%+v labels=%v", delta.Signature, delta.Labels)
	}
	base := f.catalog(t)
	if len(delta.Spec.Actions) != len(base.Spec.Actions) {
		t.Fatalf("delta has %d actions, base %d", len(delta.Spec.Actions), len(base.Spec.Actions))
	}
	for i, a := range delta.Spec.Actions {
		want := base.Spec.Actions[i].Class
		if a.ID == "node.gated" {
			want = wbv1.ActionClassReadOnlySpawn
		}
		if a.ID != base.Spec.Actions[i].ID || a.Class != want {
			t.Fatalf("delta action %d = %s/%s, want %s/%s", i, a.ID, a.Class, base.Spec.Actions[i].ID, want)
		}
	}
	eventually(t, 30*time.Second, "delta catalog reported unauthorized", func() (bool, string) {
		var c wbv1.ActionCatalog
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(&delta), &c))
		return c.Status.Authorization == wbv1.ActionUnauthorized, string(c.Status.Authorization)
	})

	unsigned := f.run("on-unsigned", "node.gated", `{"msg":"a"}`)
	unsigned.Spec.CatalogRef = wbv1.ObjectName(delta.Name)
	mustRefuse(t, env.Client.Create(ctx, unsigned), "action-catalog-unauthorized")

	_, err := f.client(t).SignCatalog(ctx, delta.Name, f.signer, f.key, metav1.Now())
	must(t, err)
	signed := f.run("on-signed", "node.gated", `{"msg":"a"}`)
	signed.Spec.CatalogRef = wbv1.ObjectName(delta.Name)
	must(t, env.Client.Create(ctx, signed))
	r = f.waitRun(t, "on-signed", "admitted by the signed delta", admitted)
	if r.Status.ConsentRequestRef != "" || r.Status.Class != wbv1.ActionClassReadOnlySpawn || r.Labels[wbv1.NodeLabel] != f.node {
		t.Fatalf("signed delta run: consentRequestRef=%q class=%s labels=%v", r.Status.ConsentRequestRef, r.Status.Class, r.Labels)
	}
	// the original catalog is untouched and still prompts
	if c := f.catalog(t); c.Spec.Actions[2].Class != wbv1.ActionClassOperatorGated || c.Signature == nil {
		t.Fatalf("base catalog changed: %+v", c.Spec.Actions[2])
	}
}

// TestCatalogEditedWhileAwaitingConsent: a C7 run held for consent against a signed
// catalog that is then edited is refused action-catalog-unauthorized (the signature no
// longer covers the catalog) and an operator's later allow-once cannot admit it.
func TestCatalogEditedWhileAwaitingConsent(t *testing.T) {
	ctx := context.Background()
	f := signedFixture(t)
	op := env.BoundAs(t, "workbench-operator", "erin", f.ns)

	r := f.askConsent(t, "gated", `{"msg":"a"}`)
	// The edit is a user's: read, change, write, and read again when the manager's status
	// write on the catalog (its verification) landed in between.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cat := f.catalog(t)
		cat.Spec.Actions[0].Description = "edited after signing"
		return env.Client.Update(ctx, cat)
	}))
	// The operator approves; whether the manager refused at the edit or at the decision,
	// the run ends refused and is never admitted.
	if err := op.Create(ctx, envtest.ConsentGrant(f.ns, "g-late", r.Status.ConsentRequestRef, wbv1.ConsentAllowOnce)); err != nil {
		t.Logf("grant after the edit refused: %v", err)
	}
	r = f.waitRun(t, "gated", "refused", func(r *wbv1.ActionRun) bool { return r.Status.Phase == wbv1.ActionRunRefused })
	if r.Status.Refusal == nil || r.Status.Refusal.Code != "action-catalog-unauthorized" {
		t.Fatalf("refusal = %+v", r.Status.Refusal)
	}
	neverAdmitted(t, r)
}

package controllers

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/testkit"
)

// TestPoolClaimAdoptsOneReadyMemberEach: claimers of a pool adopt its Ready members oldest
// first, one member each (the member is labelled claimed-by the claimer's UID, the claimer
// bound to the member's node with status.poolMember naming it); a claimer finding no member
// left claims nothing; a claimer naming a missing pool is refused pool-not-found and one
// whose spec differs from the template pool-template-mismatch.
func TestPoolClaimAdoptsOneReadyMemberEach(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "ctl-pool-")
	node := "node-pool-a"
	capObj := envtest.HostLocalCapability(node)
	if err := env.Client.Create(ctx, capObj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating capability: %v", err)
	}
	spec := func() wbv1.EnvironmentSpec {
		// read-only: a host directory has one read-write tenant, any number of readers
		return wbv1.EnvironmentSpec{Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: testkit.Ptr("/srv/pool/" + ns),
			Access: testkit.Ptr(wbv1.RootAccessReadOnly)}}}
	}
	pool := &wbv1.EnvironmentPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}, Spec: wbv1.EnvironmentPoolSpec{Template: spec(), Replicas: testkit.Ptr[int32](0)}}
	testkit.Must(t, env.Client.Create(ctx, pool))
	var members []*wbv1.Environment
	for _, name := range []string{"m1", "m2"} {
		m := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{wbv1.PoolLabel: "p"}}, Spec: spec()}
		testkit.Must(t, env.Client.Create(ctx, m))
		m.Status.Phase, m.Status.NodeName, m.Status.CapabilityRef, m.Status.EffectiveOperationalContext = wbv1.EnvironmentReady, node, capObj.Name, "test"
		testkit.Must(t, env.Client.Status().Update(ctx, m))
		members = append(members, m)
	}
	r := &EnvironmentReconciler{Client: env.Client, APIReader: env.Client, Recorder: recorder(t, "test-environment"), Now: newClock().Now}
	claimer := func(name, pool string, mut ...func(*wbv1.EnvironmentSpec)) *wbv1.Environment {
		t.Helper()
		e := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec()}
		e.Spec.PoolRef = &wbv1.PoolReference{Name: pool}
		for _, m := range mut {
			m(&e.Spec)
		}
		testkit.Must(t, env.Client.Create(ctx, e))
		reconcileOnce(t, r, e)
		return get(t, e)
	}
	memberOf := func(c *wbv1.Environment) string {
		for _, m := range members {
			if got := get(t, &wbv1.Environment{ObjectMeta: m.ObjectMeta}); got.Labels[wbv1.PoolClaimedByLabel] == string(c.UID) {
				return got.Name
			}
		}
		return ""
	}
	for _, want := range []string{"m1", "m2"} {
		c := claimer("c-"+want, "p")
		if got := memberOf(c); got != want {
			t.Fatalf("claimer %s holds member %q, want %s (oldest Ready member first, one each)", c.Name, got, want)
		}
		if c.Status.PoolMember == nil || c.Status.PoolMember.Name != want || c.Labels[wbv1.NodeLabel] != node {
			t.Fatalf("claimer %s: poolMember %+v, labels %v", c.Name, c.Status.PoolMember, c.Labels)
		}
	}
	late := claimer("c-late", "p")
	if got := memberOf(late); got != "" {
		t.Fatalf("a claimer of an empty pool took member %s", got)
	}
	if pm := late.Status.PoolMember; pm != nil && pm.UID != string(late.UID) {
		t.Fatalf("a claimer of an empty pool names member %+v", pm)
	}

	refused := func(c *wbv1.Environment, code actuation.Code) {
		t.Helper()
		s := meta.FindStatusCondition(c.Status.Conditions, wbv1.ConditionScheduled)
		if s == nil || s.Status != metav1.ConditionFalse || !strings.HasPrefix(s.Message, string(code)+":") {
			t.Fatalf("claimer %s: Scheduled %+v, want False with %s", c.Name, s, code)
		}
	}
	refused(claimer("c-nopool", "nope"), actuation.CodePoolNotFound)
	refused(claimer("c-other", "p", func(s *wbv1.EnvironmentSpec) { s.Roots[0].HostPath = testkit.Ptr("/srv/elsewhere") }), actuation.CodePoolTemplateMismatch)
}

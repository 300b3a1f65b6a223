package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// poolTemplate is a fixture-copy.v1 template over a fresh source directory holding seed.txt.
func poolTemplate(t *testing.T) wbv1.EnvironmentSpec {
	t.Helper()
	src := workDir(t)
	must(t, writeFile(filepath.Join(src, "seed.txt"), "seed\n"))
	return wbv1.EnvironmentSpec{Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Source: ptr(src)}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName}}
}

func createPool(t *testing.T, ns, name string, replicas int32, tmpl wbv1.EnvironmentSpec) {
	t.Helper()
	must(t, env.Client.Create(context.Background(), &wbv1.EnvironmentPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: wbv1.EnvironmentPoolSpec{Template: tmpl, Replicas: ptr(replicas)}}))
}

// members lists the pool's members by name → object.
func members(t *testing.T, ns, pool string) map[string]wbv1.Environment {
	t.Helper()
	var l wbv1.EnvironmentList
	must(t, env.Client.List(context.Background(), &l, client.InNamespace(ns), client.MatchingLabels{wbv1.PoolLabel: pool}))
	out := map[string]wbv1.Environment{}
	for _, e := range l.Items {
		out[e.Name] = e
	}
	return out
}

// waitPoolReady waits until the pool reports want ready members of its current template and
// returns them (unclaimed, Ready).
func waitPoolReady(t *testing.T, ns, name string, want int32) map[string]wbv1.Environment {
	t.Helper()
	var ready map[string]wbv1.Environment
	eventually(t, 60*time.Second, "pool "+name+" ready", func() (bool, string) {
		var p wbv1.EnvironmentPool
		get(t, ns, name, &p)
		ready = map[string]wbv1.Environment{}
		for n, m := range members(t, ns, name) {
			if m.Status.Phase == wbv1.EnvironmentReady && m.Labels[wbv1.PoolClaimedByLabel] == "" && m.DeletionTimestamp.IsZero() &&
				m.Labels[wbv1.PoolTemplateLabel] == p.Status.TemplateDigest {
				ready[n] = m
			}
		}
		readyCond := false
		for _, c := range p.Status.Conditions {
			readyCond = readyCond || (c.Type == wbv1.ConditionReady && c.Status == metav1.ConditionTrue)
		}
		return p.Status.ReadyReplicas == want && p.Status.Replicas == want && len(ready) == int(want) && readyCond &&
				p.Status.ObservedGeneration == p.Generation,
			fmt.Sprintf("status=%+v members=%d", p.Status, len(ready))
	})
	return ready
}

// updatePool changes the pool's spec, read afresh on a conflict with the pool controller's
// own writes (its finalizer).
func updatePool(t *testing.T, ns, name string, change func(*wbv1.EnvironmentPool)) {
	t.Helper()
	update(t, env.Client, ns, name, change)
}

func claimer(ns, name, pool string, spec wbv1.EnvironmentSpec) *wbv1.Environment {
	s := *spec.DeepCopy()
	s.PoolRef = &wbv1.PoolReference{Name: pool}
	return &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: s}
}

func waitEnvReady(t *testing.T, ns, name string) *wbv1.Environment {
	t.Helper()
	var e wbv1.Environment
	eventually(t, 60*time.Second, "environment "+name+" Ready", func() (bool, string) {
		get(t, ns, name, &e)
		return e.Status.Phase == wbv1.EnvironmentReady && e.Status.ObservedGeneration == e.Generation, fmt.Sprintf("%+v", e.Status)
	})
	return &e
}

func waitGone(t *testing.T, obj client.Object) {
	t.Helper()
	key := client.ObjectKeyFromObject(obj)
	eventually(t, 60*time.Second, "deletion of "+key.String(), func() (bool, string) {
		err := env.Client.Get(context.Background(), key, obj)
		return apierrors.IsNotFound(err), fmt.Sprintf("err=%v", err)
	})
}

// fixtureDir is where fixture-copy.v1 keeps the copies of the environment with uid.
func fixtureDir(uid types.UID) string { return filepath.Join(stateDir, "fixtures", string(uid)) }

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// TestPoolFillClaimRefill: the pool fills to its replicas with Ready fixture copies; a claimer
// adopts one of them (the very copy, moved to the claimer: no second copy is made, nothing
// remains under the member's identity, the source generation advances), the claimed member
// object is deleted and the pool refills with a new member.
func TestPoolFillClaimRefill(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	tmpl := poolTemplate(t)
	createPool(t, ns, "pool", 2, tmpl)
	before := waitPoolReady(t, ns, "pool", 2)
	for _, m := range before {
		if !exists(filepath.Join(fixtureDir(m.UID), "repo")) {
			t.Fatalf("member %s is Ready but has no copy under %s", m.Name, fixtureDir(m.UID))
		}
		// A marker written into each member's copy: the claimer must find exactly its
		// member's copy (adopted, not copied afresh from the source).
		copies, err := filepath.Glob(filepath.Join(fixtureDir(m.UID), "repo", "fx-*"))
		must(t, err)
		if len(copies) != 1 {
			t.Fatalf("member %s: want one copy, have %v", m.Name, copies)
		}
		must(t, writeFile(filepath.Join(copies[0], "member.txt"), m.Name))
	}

	seen := watchVersions(t, ns, "claim")
	must(t, env.Client.Create(ctx, claimer(ns, "claim", "pool", tmpl)))
	c := waitEnvReady(t, ns, "claim")
	assertNodeWritesClaimerPhase(t, c, seen(c.ResourceVersion))
	pm := c.Status.PoolMember
	if pm == nil {
		t.Fatalf("claimer Ready without a pool member: %+v", c.Status)
	}
	m, ok := before[pm.Name]
	if !ok || string(m.UID) != pm.UID {
		t.Fatalf("claimer adopted %+v, not one of the ready members %v", pm, keys(before))
	}
	if c.Status.SourceGeneration <= m.Status.SourceGeneration {
		t.Errorf("claimer source generation %d did not advance past the member's %d", c.Status.SourceGeneration, m.Status.SourceGeneration)
	}
	if c.Status.NodeName != nodeName || c.Labels[wbv1.NodeLabel] != nodeName {
		t.Errorf("claimer not bound to the member's node: status %q label %q", c.Status.NodeName, c.Labels[wbv1.NodeLabel])
	}
	copies, err := filepath.Glob(filepath.Join(fixtureDir(c.UID), "repo", "fx-*"))
	must(t, err)
	if len(copies) != 1 {
		t.Fatalf("claimer: want one copy, have %v", copies)
	}
	got, err := os.ReadFile(filepath.Join(copies[0], "member.txt"))
	if err != nil || string(got) != pm.Name {
		t.Fatalf("claimer's copy is not the adopted member's (member.txt = %q, %v)", got, err)
	}
	// The claimed member object goes; nothing answers to its identity any more.
	waitGone(t, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pm.Name}})
	if exists(fixtureDir(m.UID)) {
		t.Errorf("the adopted member's directory %s is still there", fixtureDir(m.UID))
	}
	// The pool refills with a new member; the other original member is still there.
	after := waitPoolReady(t, ns, "pool", 2)
	if _, again := after[pm.Name]; again {
		t.Fatalf("claimed member %s handed out again", pm.Name)
	}
	fresh := 0
	for n := range after {
		if _, old := before[n]; !old {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("want exactly one new member after one claim; before %v after %v", keys(before), keys(after))
	}
	var p wbv1.EnvironmentPool
	get(t, ns, "pool", &p)
	if p.Status.Claims != 1 {
		t.Errorf("pool counts %d claims, want 1", p.Status.Claims)
	}
	// The claimer is an ordinary environment from here on: deleting it tears its copy down.
	must(t, env.Client.Delete(ctx, c))
	waitGone(t, c)
	if exists(fixtureDir(c.UID)) {
		t.Errorf("claimer's copies %s survived its deletion", fixtureDir(c.UID))
	}
}

// watchVersions records every version of Environment ns/name the API server publishes from
// now on; the returned function waits (bounded) until the watch delivered version rv, stops
// the watch and returns what it saw.
func watchVersions(t *testing.T, ns, name string) func(rv string) []wbv1.Environment {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := wc.Watch(ctx, &wbv1.EnvironmentList{}, client.InNamespace(ns))
	if err != nil {
		cancel()
		t.Fatalf("watching environments of %s: %v", ns, err)
	}
	t.Cleanup(func() { w.Stop(); cancel() })
	return func(rv string) []wbv1.Environment {
		defer cancel()
		defer w.Stop()
		var out []wbv1.Environment
		timeout := time.NewTimer(30 * time.Second)
		defer timeout.Stop()
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("the watch of %s/%s ended before version %s", ns, name, rv)
				}
				if e, ok := ev.Object.(*wbv1.Environment); ok && e.Name == name {
					out = append(out, *e.DeepCopy())
					if e.ResourceVersion == rv {
						return out
					}
				}
			case <-timeout.C:
				t.Fatalf("the watch of %s/%s did not deliver version %s in 30 s (saw %d)", ns, name, rv, len(out))
			}
		}
	}
}

// assertNodeWritesClaimerPhase checks the phase hand-off of a pool claimer
// (wbv1.EnvironmentPhaseWriter): its node writes the phase in the same write as its Ready
// condition — no published version is Ready=True with another phase, and no version ever
// read Ready before the node's condition did — and the manager owns neither the phase nor
// the health conditions.
func assertNodeWritesClaimerPhase(t *testing.T, ready *wbv1.Environment, versions []wbv1.Environment) {
	t.Helper()
	if len(versions) == 0 {
		t.Fatalf("the watch saw no version of %s", ready.Name)
	}
	sawReady := false
	for _, v := range versions {
		rc := false
		for _, c := range v.Status.Conditions {
			rc = rc || (c.Type == wbv1.ConditionReady && c.Status == metav1.ConditionTrue)
		}
		// The gap between the binding and the node's first write is closed: a bound claimer
		// its node has not written yet reads Reconciling=True (kstatus InProgress).
		if v.Status.PoolMember != nil && meta.FindStatusCondition(v.Status.Conditions, wbv1.ConditionReady) == nil &&
			!meta.IsStatusConditionTrue(v.Status.Conditions, wbv1.ConditionReconciling) {
			t.Errorf("version %s: bound to pool member %s before its node wrote, without Reconciling=True: %+v",
				v.ResourceVersion, v.Status.PoolMember.Name, v.Status.Conditions)
		}
		if rc != (v.Status.Phase == wbv1.EnvironmentReady) {
			t.Errorf("version %s: Ready condition %v with phase %q: the phase was not written with the node's Ready",
				v.ResourceVersion, rc, v.Status.Phase)
		}
		sawReady = sawReady || rc
	}
	if !sawReady {
		t.Errorf("the watch saw no Ready version of %s among %d", ready.Name, len(versions))
	}
	for _, mf := range ready.ManagedFields {
		if mf.Subresource != "status" || mf.FieldsV1 == nil {
			continue
		}
		owns := strings.Contains(mf.FieldsV1.GetRawString(), `"f:phase"`)
		switch {
		case strings.HasPrefix(mf.Manager, "workbench-manager/") && owns:
			t.Errorf("the manager (%s) owns the claimer's phase: %s", mf.Manager, mf.FieldsV1.GetRawString())
		case mf.Manager == "workbench-node-agent/environment" && !owns:
			t.Errorf("the node agent's status fields do not include the phase: %s", mf.FieldsV1.GetRawString())
		}
	}
}

func keys(m map[string]wbv1.Environment) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestPoolConcurrentClaims: two claimers created at once against two Ready members each
// adopt a different member (the claim is exactly-once), and a third, arriving while the
// pool is empty, is allocated normally rather than waiting or sharing.
func TestPoolConcurrentClaims(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	tmpl := poolTemplate(t)
	createPool(t, ns, "pool", 2, tmpl)
	before := waitPoolReady(t, ns, "pool", 2)
	createClaimersAtOnce(t, ns, "pool", tmpl, "claim-0", "claim-1")
	a, b := waitEnvReady(t, ns, "claim-0"), waitEnvReady(t, ns, "claim-1")
	if a.Status.PoolMember == nil || b.Status.PoolMember == nil {
		t.Fatalf("both claimers should adopt a member: %+v / %+v", a.Status.PoolMember, b.Status.PoolMember)
	}
	if a.Status.PoolMember.UID == b.Status.PoolMember.UID {
		t.Fatalf("two claimers adopted the same member %s", a.Status.PoolMember.Name)
	}
	for _, c := range []*wbv1.Environment{a, b} {
		if _, ok := before[c.Status.PoolMember.Name]; !ok {
			t.Errorf("%s adopted %s, not an original member %v", c.Name, c.Status.PoolMember.Name, keys(before))
		}
		if exists(fixtureDir(types.UID(c.Status.PoolMember.UID))) || !exists(fixtureDir(c.UID)) {
			t.Errorf("%s: the instance did not move from %s to %s", c.Name, c.Status.PoolMember.UID, c.UID)
		}
	}
	// Empty the pool (replicas 0, so no refill races it) and claim again: allocated
	// normally, no member.
	updatePool(t, ns, "pool", func(p *wbv1.EnvironmentPool) { p.Spec.Replicas = ptr(int32(0)) })
	eventually(t, 60*time.Second, "pool emptied", func() (bool, string) {
		ms := members(t, ns, "pool")
		return len(ms) == 0, fmt.Sprintf("%v", keys(ms))
	})
	must(t, env.Client.Create(ctx, claimer(ns, "claim-2", "pool", tmpl)))
	c := waitEnvReady(t, ns, "claim-2")
	if c.Status.PoolMember != nil {
		t.Fatalf("claim on an empty pool adopted %+v", c.Status.PoolMember)
	}
	if !exists(filepath.Join(fixtureDir(c.UID), "repo")) {
		t.Fatalf("claim-2 allocated normally but has no copy")
	}
}

// TestPoolLostClaimRace: two claimers race for a pool's one Ready member. The manager writes
// each claimer's binding (status.poolMember) at the same time as its claim of the member, so
// the loser may be bound, for a moment, to a member it did not get. Exactly one claimer
// adopts the member's instance; the other never acts on it (its node waits for the member's
// claimed-by label to name it, which it never does) and gets another member or is allocated
// afresh (status.poolMember then names itself: rewritten, never removed); both are Ready with
// the node writing their phase, and deleting the claimers and the pool leaves no copy of
// anyone.
func TestPoolLostClaimRace(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	tmpl := poolTemplate(t)
	createPool(t, ns, "pool", 1, tmpl)
	before := waitPoolReady(t, ns, "pool", 1)
	var orig wbv1.Environment
	for _, m := range before {
		orig = m
	}
	// copyOf is the one copy of the repo root under uid's fixtures.
	copyOf := func(uid types.UID) string {
		t.Helper()
		copies, err := filepath.Glob(filepath.Join(fixtureDir(uid), "repo", "fx-*"))
		must(t, err)
		if len(copies) != 1 {
			t.Fatalf("environment %s: want one copy, have %v", uid, copies)
		}
		return copies[0]
	}
	must(t, writeFile(filepath.Join(copyOf(orig.UID), "marker.txt"), "member\n"))
	seen := map[string][]func(rv string) []wbv1.Environment{}
	for _, n := range []string{"race-0", "race-1"} {
		seen[n] = append(seen[n], watchVersions(t, ns, n))
	}
	createClaimersAtOnce(t, ns, "pool", tmpl, "race-0", "race-1")
	ready := []*wbv1.Environment{waitEnvReady(t, ns, "race-0"), waitEnvReady(t, ns, "race-1")}
	var winner, loser *wbv1.Environment
	for _, c := range ready {
		if c.Status.PoolMember != nil && c.Status.PoolMember.UID == string(orig.UID) {
			if winner != nil {
				t.Fatalf("both claimers record member %s", orig.Name)
			}
			winner = c
		} else {
			loser = c
		}
	}
	if winner == nil || loser == nil {
		t.Fatalf("exactly one claimer should hold member %s: %+v / %+v", orig.Name, ready[0].Status.PoolMember, ready[1].Status.PoolMember)
	}
	var m wbv1.Environment
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&orig), &m); err == nil && m.Labels[wbv1.PoolClaimedByLabel] != string(winner.UID) {
		t.Fatalf("member %s is claimed by %q, not by the claimer recording it (%s)", orig.Name, m.Labels[wbv1.PoolClaimedByLabel], winner.UID)
	}
	if got, err := os.ReadFile(filepath.Join(copyOf(winner.UID), "marker.txt")); err != nil || string(got) != "member\n" {
		t.Fatalf("the winner %s does not hold the member's copy: %q %v", winner.Name, got, err)
	}
	if lc := copyOf(loser.UID); exists(filepath.Join(lc, "marker.txt")) || !exists(filepath.Join(lc, "seed.txt")) {
		t.Fatalf("the loser %s should hold a copy of its own, not the member's", loser.Name)
	}
	switch pm := loser.Status.PoolMember; {
	case pm == nil:
		t.Logf("%s lost the race before its binding was written: allocated normally", loser.Name)
	case pm.UID == string(loser.UID):
		t.Logf("%s was bound beside a lost claim; no member left: allocated afresh (poolMember names itself)", loser.Name)
	default:
		if _, orig := before[pm.Name]; orig {
			t.Fatalf("the loser %s records the original member %s", loser.Name, pm.Name)
		}
		t.Logf("%s adopted the refilled member %s", loser.Name, pm.Name)
	}
	// Every version of both claimers: for a claimer with a poolMember, Ready only with phase
	// Ready (the node's write); never a Ready condition while bound to a member the claimer
	// does not hold; poolMember, once set, never removed.
	lostBound := false
	for _, c := range ready {
		vs := seen[c.Name][0](c.ResourceVersion)
		if c.Status.PoolMember != nil {
			// A loser whose pass saw no claimable member at all is an ordinary
			// Environment (no poolMember): the manager writes its phase.
			assertNodeWritesClaimerPhase(t, c, vs)
		}
		had := false
		for _, v := range vs {
			pm := v.Status.PoolMember
			if had && pm == nil {
				t.Errorf("%s version %s: status.poolMember was removed", c.Name, v.ResourceVersion)
			}
			had = had || pm != nil
			if c == loser && pm != nil && pm.UID == string(orig.UID) {
				lostBound = true
				// Its node writes nothing for it (no Ready, no source generation); the
				// manager's binding says Reconciling=True.
				if meta.FindStatusCondition(v.Status.Conditions, wbv1.ConditionReady) != nil || v.Status.SourceGeneration != 0 {
					t.Errorf("%s version %s: its node wrote while it was bound to a member it lost: %+v", c.Name, v.ResourceVersion, v.Status)
				}
			}
		}
	}
	t.Logf("loser bound to the lost member in some version: %v", lostBound)
	// Nothing leaks: the claimers and the pool deleted, no copy of anyone remains.
	uids := []types.UID{orig.UID, winner.UID, loser.UID}
	for _, c := range ready {
		must(t, env.Client.Delete(ctx, c))
	}
	for _, c := range ready {
		waitGone(t, c)
	}
	for _, mm := range members(t, ns, "pool") {
		uids = append(uids, mm.UID)
	}
	var p wbv1.EnvironmentPool
	get(t, ns, "pool", &p)
	must(t, env.Client.Delete(ctx, &p))
	waitGone(t, &p)
	eventually(t, 60*time.Second, "every member gone", func() (bool, string) {
		ms := members(t, ns, "pool")
		return len(ms) == 0, fmt.Sprintf("%v", keys(ms))
	})
	for _, u := range uids {
		if exists(fixtureDir(u)) {
			t.Errorf("copies left at %s", fixtureDir(u))
		}
	}
}

// TestPoolTemplateRecreate: changing the template replaces the members made from the old one.
func TestPoolTemplateRecreate(t *testing.T) {
	ns := namespace(t)
	createPool(t, ns, "pool", 1, poolTemplate(t))
	old := waitPoolReady(t, ns, "pool", 1)
	var p wbv1.EnvironmentPool
	get(t, ns, "pool", &p)
	oldDigest := p.Status.TemplateDigest
	updatePool(t, ns, "pool", func(p *wbv1.EnvironmentPool) {
		p.Spec.Template.OperationalContext = &wbv1.OperationalContext{Class: "research", Summary: ptr("template v2")}
	})
	eventually(t, 60*time.Second, "old members replaced", func() (bool, string) {
		var cur wbv1.EnvironmentPool
		get(t, ns, "pool", &cur)
		ms := members(t, ns, "pool")
		for n := range old {
			if _, still := ms[n]; still {
				return false, "old member " + n + " still there"
			}
		}
		for n, m := range ms {
			if m.Labels[wbv1.PoolTemplateLabel] != cur.Status.TemplateDigest || m.Status.Phase != wbv1.EnvironmentReady {
				return false, fmt.Sprintf("member %s: template %s phase %s", n, m.Labels[wbv1.PoolTemplateLabel], m.Status.Phase)
			}
			if m.Spec.OperationalContext == nil || m.Spec.OperationalContext.Class != "research" {
				return false, "member " + n + " not from the new template"
			}
		}
		return len(ms) == 1 && cur.Status.TemplateDigest != oldDigest && cur.Status.ReadyReplicas == 1, fmt.Sprintf("%d members, %+v", len(ms), cur.Status)
	})
	for _, m := range old {
		if exists(fixtureDir(m.UID)) {
			t.Errorf("replaced member %s left its copies at %s", m.Name, fixtureDir(m.UID))
		}
	}
}

// TestPoolDeleteReleasesMembers: deleting the pool deletes its unclaimed members, each torn
// down by its node as any Environment is (copies removed, finalizers released), while a
// claimed environment stays.
func TestPoolDeleteReleasesMembers(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	tmpl := poolTemplate(t)
	createPool(t, ns, "pool", 2, tmpl)
	waitPoolReady(t, ns, "pool", 2)
	must(t, env.Client.Create(ctx, claimer(ns, "kept", "pool", tmpl)))
	kept := waitEnvReady(t, ns, "kept")
	ms := waitPoolReady(t, ns, "pool", 2)
	var p wbv1.EnvironmentPool
	get(t, ns, "pool", &p)
	must(t, env.Client.Delete(ctx, &p))
	waitGone(t, &p)
	for _, m := range ms {
		waitGone(t, &m)
		if exists(fixtureDir(m.UID)) {
			t.Errorf("released member %s left its copies at %s", m.Name, fixtureDir(m.UID))
		}
	}
	var k wbv1.Environment
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(kept), &k))
	if k.Status.Phase != wbv1.EnvironmentReady || !exists(fixtureDir(k.UID)) {
		t.Fatalf("the claimed environment did not survive its pool's deletion: %+v", k.Status)
	}
}

// TestPoolClaimRefusals: a poolRef naming no pool, and a claimer whose allocation differs
// from the template, are refused with their stable codes and never placed.
func TestPoolClaimRefusals(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	tmpl := poolTemplate(t)
	must(t, env.Client.Create(ctx, claimer(ns, "orphan", "nope", tmpl)))
	createPool(t, ns, "pool", 1, tmpl)
	other := poolTemplate(t) // another source directory: another allocation
	must(t, env.Client.Create(ctx, claimer(ns, "mismatch", "pool", other)))
	for name, code := range map[string]actuation.Code{"orphan": actuation.CodePoolNotFound, "mismatch": actuation.CodePoolTemplateMismatch} {
		eventually(t, 30*time.Second, name+" refused with "+string(code), func() (bool, string) {
			var e wbv1.Environment
			get(t, ns, name, &e)
			for _, c := range e.Status.Conditions {
				if c.Type == wbv1.ConditionScheduled && c.Status == metav1.ConditionFalse && strings.HasPrefix(c.Message, string(code)+":") {
					return e.Status.NodeName == "" && e.Status.PoolMember == nil, fmt.Sprintf("%+v", e.Status)
				}
			}
			return false, fmt.Sprintf("%+v", e.Status)
		})
	}
	// A pool created later serves the claimer that named it.
	createPool(t, ns, "nope", 1, tmpl)
	e := waitEnvReady(t, ns, "orphan")
	if e.Status.NodeName != nodeName {
		t.Fatalf("orphan not placed once its pool exists: %+v", e.Status)
	}
}

// createClaimersAtOnce creates one claimer of pool per name, all at the same moment.
func createClaimersAtOnce(t *testing.T, ns, pool string, tmpl wbv1.EnvironmentSpec, names ...string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = env.Client.Create(context.Background(), claimer(ns, n, pool, tmpl))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		must(t, err)
	}
}

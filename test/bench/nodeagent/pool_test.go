package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/platform/spans"
	"sensorium.dev/workbench/internal/test/samples"
)

// BenchmarkPoolClaim measures claim → Ready for fixture-copy.v1: an Environment with
// spec.poolRef created through the API server until the phase a user reads is Ready (the
// manager claims a Ready member, the node agent adopts its copy). In the same run, per
// iteration: the floor (API create + watch round trip of a ConfigMap) and a cold
// fixture-copy.v1 Environment create → Ready of the same template (a copy made on demand).
// The pool is refilled, untimed, before every claim. Run with -benchtime=Nx.
func BenchmarkPoolClaim(b *testing.B) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-pool-"}}
	must(b, env.Client.Create(ctx, ns))
	src, err := os.MkdirTemp(admitted, "pool-src-")
	must(b, err)
	for i := range 32 { // a small repository-sized tree: 32 files of 4 KiB
		must(b, os.WriteFile(filepath.Join(src, "f"+strconv.Itoa(i)+".txt"), make([]byte, 4096), 0o644))
	}
	tmpl := wbv1.EnvironmentSpec{Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Source: &src}},
		NodeSelector: map[string]string{wbv1.NodeLabel: node}}
	replicas := int32(2)
	must(b, env.Client.Create(ctx, &wbv1.EnvironmentPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns.Name},
		Spec: wbv1.EnvironmentPoolSpec{Template: tmpl, Replicas: &replicas}}))
	poolReady := func() {
		deadline := time.Now().Add(60 * time.Second)
		for {
			var p wbv1.EnvironmentPool
			must(b, env.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "pool"}, &p))
			if p.Status.ReadyReplicas == replicas && p.Status.ObservedGeneration == p.Generation {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("pool not refilled: %+v", p.Status)
			}
			time.Sleep(20 * time.Millisecond) // untimed set-up between samples
		}
	}
	rec := spans.NewRecorder()
	spans.Install(rec)
	defer spans.Install(nil)
	steps := map[string]samples.Durations{}
	// createReady creates e and returns the time until the API reports it Ready. For a
	// claimer, the steps every component marked (spans) are kept, as times from Create.
	createReady := func(e *wbv1.Environment) (time.Duration, *wbv1.Environment) {
		w, err := wc.Watch(ctx, &wbv1.EnvironmentList{}, client.InNamespace(ns.Name))
		must(b, err)
		defer w.Stop()
		key := ns.Name + "/" + e.Name
		t0 := time.Now()
		must(b, env.Client.Create(ctx, e))
		spans.Mark(key, "create-returned")
		for ev := range w.ResultChan() {
			got, ok := ev.Object.(*wbv1.Environment)
			if ok && got.Name == e.Name {
				if got.Status.NodeName != "" {
					spans.Mark(key, "watch-bound")
				}
				spans.Mark(key, "watch-phase-"+string(got.Status.Phase))
			}
			if ok && got.Name == e.Name && got.Status.Phase == wbv1.EnvironmentReady {
				d := time.Since(t0)
				for _, p := range rec.Take(key) {
					if e.Spec.PoolRef != nil {
						steps[p.Step] = append(steps[p.Step], p.At.Sub(t0))
					}
				}
				return d, got
			}
			if got, ok := ev.Object.(*wbv1.Environment); ok && got.Name == e.Name && got.Status.Phase == wbv1.EnvironmentFailed {
				b.Fatalf("environment %s failed: %+v", e.Name, got.Status)
			}
		}
		b.Fatalf("watch of %s ended", e.Name)
		return 0, nil
	}
	var floor, claim, cold samples.Durations
	adopted := 0
	for i := 0; i < b.N; i++ {
		poolReady()
		// Floor: create + watch until the API server reports it.
		w, err := wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns.Name))
		must(b, err)
		t0 := time.Now()
		must(b, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "m" + strconv.Itoa(i), Namespace: ns.Name}}))
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added {
				break
			}
		}
		floor = append(floor, time.Since(t0))
		w.Stop()
		// Claim.
		s := *tmpl.DeepCopy()
		s.PoolRef = &wbv1.PoolReference{Name: "pool"}
		d, got := createReady(&wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "c" + strconv.Itoa(i), Namespace: ns.Name}, Spec: s})
		claim = append(claim, d)
		if got.Status.PoolMember != nil {
			adopted++
		}
		// Cold allocation of the same template.
		d, _ = createReady(&wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "cold" + strconv.Itoa(i), Namespace: ns.Name}, Spec: *tmpl.DeepCopy()})
		cold = append(cold, d)
	}
	if adopted != b.N {
		b.Fatalf("%d of %d claims adopted a pool member", adopted, b.N)
	}
	reportSpans(b, steps)
	claim.Report(b, "claim")
	cold.Report(b, "cold")
	floor.Report(b, "api-roundtrip")
	samples.Ratio(b, "claim-to-floor", claim, floor)
	samples.Ratio(b, "claim-to-cold", claim, cold)
}

package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/platform/spans"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/samples"
)

// BenchmarkPoolClaim measures claim → Ready for fixture-copy.v1: an Environment with
// spec.poolRef created through the API server until the phase a user reads is Ready (the
// manager claims a Ready member, the node agent adopts its copy). In the same run, per
// iteration: the floor (API create + watch round trip of a ConfigMap) and a cold
// fixture-copy.v1 Environment create → Ready of the same template (a copy made on demand).
// The pool is refilled, untimed, before every claim. Every component in this process
// marks the claimer's steps (internal/platform/spans): span-<step>-p50-ms is the median
// time from Create to that step. Run with -benchtime=Nx.
func BenchmarkPoolClaim(b *testing.B) {
	src, err := os.MkdirTemp(admitted, "pool-src-")
	must(b, err)
	for i := range 32 { // a small repository-sized tree: 32 files of 4 KiB
		must(b, os.WriteFile(filepath.Join(src, "f"+strconv.Itoa(i)+".txt"), make([]byte, 4096), 0o644))
	}
	tmpl := wbv1.EnvironmentSpec{Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Source: &src}},
		NodeSelector: map[string]string{wbv1.NodeLabel: node}}
	poolClaim(b, tmpl, 2, 60*time.Second, false)
}

// BenchmarkPoolClaimVM is BenchmarkPoolClaim for qemu-microvm.v1 (TCG): the claimer adopts
// the member's running, handshaken guest (re-bound with a fresh nonce), against the same
// floor and a cold VM Environment create → Ready (a boot) of the same template. Claimer
// and cold environment are deleted after each iteration (the node runs at most four VMs).
func BenchmarkPoolClaimVM(b *testing.B) {
	im := vmImage(b)
	tmpl := wbv1.EnvironmentSpec{Backend: wbv1.BackendQEMUMicroVM, Roots: []wbv1.EnvironmentRoot{{Name: "repo"}}, ImageRef: &im.Name,
		NodeSelector: map[string]string{wbv1.NodeLabel: node}}
	poolClaim(b, tmpl, 1, 240*time.Second, true)
}

func poolClaim(b *testing.B, tmpl wbv1.EnvironmentSpec, replicas int32, readyTimeout time.Duration, deleteAfter bool) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-pool-"}}
	must(b, env.Client.Create(ctx, ns))
	pool := &wbv1.EnvironmentPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns.Name},
		Spec: wbv1.EnvironmentPoolSpec{Template: tmpl, Replicas: &replicas}}
	must(b, env.Client.Create(ctx, pool))
	defer func() {
		// The pool's members are torn down with it (VMs included), before the next benchmark.
		_ = env.Client.Delete(ctx, pool)
		for deadline := time.Now().Add(readyTimeout); ; time.Sleep(50 * time.Millisecond) {
			var l wbv1.EnvironmentList
			must(b, env.Client.List(ctx, &l, client.InNamespace(ns.Name)))
			if len(l.Items) == 0 || time.Now().After(deadline) {
				return
			}
			for i := range l.Items {
				_ = env.Client.Delete(ctx, &l.Items[i])
			}
		}
	}()
	poolReady := func() {
		deadline := time.Now().Add(readyTimeout)
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
		timeout := time.After(readyTimeout)
		t0 := time.Now()
		must(b, env.Client.Create(ctx, e))
		spans.Mark(key, "create-returned")
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatalf("watch of %s ended", e.Name)
				}
				got, isEnv := ev.Object.(*wbv1.Environment)
				if !isEnv || got.Name != e.Name {
					continue
				}
				if got.Status.NodeName != "" {
					spans.Mark(key, "watch-bound")
				}
				spans.Mark(key, "watch-phase-"+string(got.Status.Phase))
				switch got.Status.Phase {
				case wbv1.EnvironmentReady:
					d := time.Since(t0)
					for _, p := range rec.Take(key) {
						if e.Spec.PoolRef != nil {
							steps[p.Step] = append(steps[p.Step], p.At.Sub(t0))
						}
					}
					return d, got
				case wbv1.EnvironmentFailed:
					b.Fatalf("environment %s failed: %+v", e.Name, got.Status)
				}
			case <-timeout:
				b.Fatalf("environment %s not Ready within %v", e.Name, readyTimeout)
			}
		}
	}
	remove := func(e *wbv1.Environment) {
		if !deleteAfter {
			return
		}
		must(b, env.Client.Delete(ctx, e))
		for deadline := time.Now().Add(readyTimeout); ; time.Sleep(20 * time.Millisecond) {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(e), &wbv1.Environment{}); apierrors.IsNotFound(err) {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("environment %s not gone within %v", e.Name, readyTimeout)
			}
		}
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
		remove(got)
		// Cold allocation of the same template.
		d, got = createReady(&wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "cold" + strconv.Itoa(i), Namespace: ns.Name}, Spec: *tmpl.DeepCopy()})
		cold = append(cold, d)
		remove(got)
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

// BenchmarkPoolClaimSystemVM is BenchmarkPoolClaimVM for the full-system variant
// (bin/guest-system, systemd first, a working disk per environment): the claimer adopts the
// member's running guest and its working disk (renamed to the claimer's, same inode),
// against the same floor and a cold full-system create → Ready (a clone and a systemd
// boot, about a minute under TCG).
func BenchmarkPoolClaimSystemVM(b *testing.B) {
	if qemuSkip != "" {
		b.Skip(qemuSkip)
	}
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "bin", "guest-system", "imagemanifest.yaml"))
	if err != nil {
		b.Skipf("the full-system image is not built (run `make guest-image`): %v", err)
	}
	var im wbv1.ImageManifest
	must(b, yaml.UnmarshalStrict(raw, &im))
	if err := env.Client.Create(ctx, im.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	full := wbv1.SystemFidelity("full-system-linux")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var c wbv1.BackendCapability
		if env.Client.Get(ctx, client.ObjectKey{Name: node + ".qemu-microvm.v1"}, &c) == nil && c.Spec.SystemFidelity == full {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no full-system qemu-microvm.v1 capability published")
		}
	}
	tmpl := wbv1.EnvironmentSpec{Backend: wbv1.BackendQEMUMicroVM, Roots: []wbv1.EnvironmentRoot{{Name: "repo"}}, ImageRef: &im.Name,
		Requirements: &wbv1.EnvironmentRequirements{SystemFidelity: &full},
		NodeSelector: map[string]string{wbv1.NodeLabel: node}}
	poolClaim(b, tmpl, 1, 400*time.Second, true)
}

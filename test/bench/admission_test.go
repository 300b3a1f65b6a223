// Package bench measures admission latency through the real API server: TerminalCommand
// creates (validating webhook + actuation core + a profile read) against ConfigMap creates
// (no webhook) in the same run, interleaved so both see the same machine load; and the
// webhook's own latency as kube-apiserver measured it
// (apiserver_admission_webhook_admission_duration_seconds, scraped before and after).
package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/samples"
	"sensorium.dev/workbench/webhooks"
)

var env *envtest.Env

func TestMain(m *testing.M) {
	var err error
	// Webhooks only: the benchmark isolates admission from reconciliation.
	env, err = envtest.Start(envtest.Options{Setup: func(mgr ctrl.Manager) error { return webhooks.SetupWithManager(mgr) }})
	if err == envtest.ErrNoAssets {
		fmt.Fprintln(os.Stderr, "SKIP bench suite:", err)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting control plane:", err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// admissions per kind and benchmark iteration.
const admissions = 500

// BenchmarkAdmissionLatency reports p50/p99 of TerminalCommand admission through the
// webhook and of the ConfigMap floor, and their ratio. Run with -benchtime=1x.
func BenchmarkAdmissionLatency(b *testing.B) {
	ctx := context.Background()
	for it := 0; it < b.N; it++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
		if err := env.Client.Create(ctx, ns); err != nil {
			b.Fatal(err)
		}
		prof := &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: ns.Name}, Spec: wbv1.CommandProfileSpec{
			Executable: "/usr/bin/git", FixedArgs: []string{"--no-pager"}, AllowedArgPrefixes: []string{"status", "--short"},
			AllowedRoots: []string{"repo"}, MaxTimeoutSeconds: 120, MaxOutputBytes: 1 << 20,
		}}
		if err := env.Client.Create(ctx, prof); err != nil {
			b.Fatal(err)
		}
		// Warm both paths (connections, caches, CEL programs); the histogram is read after
		// the warm-up so only measured admissions count.
		var before webhookHistograms
		var cmdLat, cmLat samples.Durations
		for i := -20; i < admissions; i++ {
			cmd := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i+20), Namespace: ns.Name}, Spec: wbv1.TerminalCommandSpec{
				SessionRef: "s", ProfileRef: "git", Argv: []string{"/usr/bin/git", "--no-pager", "status", "--short"}, Cwd: wbv1.CwdAddress{Root: "repo", Path: "src/pkg"},
				Env: nil, TimeoutSeconds: 60, OutputBytes: 65536,
			}}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m%d", i+20), Namespace: ns.Name}, Data: map[string]string{"argv": "/usr/bin/git --no-pager status --short"}}
			t0 := time.Now()
			if err := env.Client.Create(ctx, cmd); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := env.Client.Create(ctx, cm); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			if i == -1 {
				var err error
				if before, err = scrapeWebhookHistograms(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if i >= 0 {
				cmdLat, cmLat = append(cmdLat, t1.Sub(t0)), append(cmLat, t2.Sub(t1))
			}
		}
		after, err := scrapeWebhookHistograms(ctx)
		if err != nil {
			b.Fatal(err)
		}
		name, h := after.sub(before).largest()
		if h.count < admissions {
			b.Fatalf("the API server's histogram counted %d admissions of the busiest webhook %q, want >= %d", h.count, name, admissions)
		}
		b.Logf("webhook %s: %d admissions by kube-apiserver's own histogram; %.1f%% within 5 ms; mean %.2f ms",
			name, h.count, 100*h.fractionWithin(0.005), 1000*h.sum/float64(h.count))
		b.ReportMetric(1000*h.quantile(0.50), "apiserver-webhook-p50-ms")
		b.ReportMetric(1000*h.quantile(0.99), "apiserver-webhook-p99-ms")
		b.ReportMetric(100*h.fractionWithin(0.005), "apiserver-webhook-pct-within-5ms")
		cmdLat.Report(b, "cmd-create")
		cmLat.Report(b, "floor-create")
		samples.Ratio(b, "create-to-floor", cmdLat, cmLat)
	}
}

// Package bench measures admission latency through the real API server. A TerminalCommand
// create passes two webhooks (the mutating binder, then the validator); the benchmark times
// it three ways in one run, interleaved so all three see the same machine load:
//   - the same TerminalCommand create in a namespace the webhook configurations exclude
//     (same CRD, schema and CEL; no webhook called): the webhooks' same-run floor;
//   - a ConfigMap create (no webhook, no CRD): the API server's floor;
//   - the webhook server's own fine-bucketed histogram (webhooks.HandlerDurationMetric) and
//     kube-apiserver's histogram of the same calls
//     (apiserver_admission_webhook_admission_duration_seconds), both read before and after.
package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/samples"
	"sensorium.dev/workbench/webhooks"
)

var env *envtest.Env

func TestMain(m *testing.M) {
	var err error
	// Webhooks only: the benchmark isolates admission from reconciliation.
	// Webhooks served as the manager binary serves them by default: HTTP/1.1 only.
	env, err = envtest.Start(envtest.Options{
		Setup:          func(mgr ctrl.Manager) error { return webhooks.SetupWithManager(mgr) },
		WebhookTLSOpts: []func(*tls.Config){http1Only},
	})
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

// noWebhooksLabel marks the floor namespace the TerminalCommand webhooks are told to skip.
const noWebhooksLabel = "bench.workbench.sensorium.dev/no-admission-webhooks"

// The TerminalCommand webhooks as the API server names them, and their paths on our server.
// Both are excluded from the floor namespace; those the API server calls on create are
// measured (since the merge, only the mutating one: it validates too).
var commandWebhooks = map[string]string{
	"mterminalcommand.workbench.sensorium.dev": "/mutate-workbench-sensorium-dev-v1alpha1-terminalcommand",
	"vterminalcommand.workbench.sensorium.dev": "/validate-workbench-sensorium-dev-v1alpha1-terminalcommand",
}

// BenchmarkAdmissionLatency reports, for TerminalCommand creates: the webhook server's p50/p99
// per webhook, kube-apiserver's ≤ 5 ms fraction per webhook, and the create p50/p99 with the
// webhooks, without them (same kind) and of a ConfigMap. Run with -benchtime=1x.
func BenchmarkAdmissionLatency(b *testing.B) { measureAdmission(b, env) }

// http1Only is cmd/manager's TLS option when --enable-http2 is false (its default).
func http1Only(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }

// BenchmarkAdmissionHTTP2 is BenchmarkAdmissionLatency against a webhook server that
// offers HTTP/2 (controller-runtime's default, the manager's --enable-http2); the suite's
// own control plane serves HTTP/1.1 only, as the manager does by default. It starts a
// second control plane for this. Run with -benchtime=1x.
func BenchmarkAdmissionHTTP2(b *testing.B) {
	h2, err := envtest.Start(envtest.Options{Setup: func(mgr ctrl.Manager) error { return webhooks.SetupWithManager(mgr) }})
	if err != nil {
		b.Fatal(err)
	}
	defer h2.Stop()
	measureAdmission(b, h2)
}

func measureAdmission(b *testing.B, env *envtest.Env) {
	ctx := context.Background()
	excludeFloorNamespace(b, ctx, env)
	for it := 0; it < b.N; it++ {
		ns, floorNS := benchNamespace(b, ctx, env, nil), benchNamespace(b, ctx, env, map[string]string{noWebhooksLabel: "true"})
		for _, n := range []string{ns, floorNS} {
			placedSession(b, ctx, env, n)
		}
		waitWebhooksSkipped(b, ctx, env, ns, floorNS)
		// Warm every path (connections, caches, CEL programs); the histograms are read after
		// the warm-up so only measured admissions count.
		var before webhookHistograms
		var beforeServer webhookHistograms
		var beforeConns map[string]bool
		var cmdLat, noHookLat, cmLat samples.Durations
		for i := -20; i < admissions; i++ {
			name := fmt.Sprintf("c%d", i+20)
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"argv": "/usr/bin/git --no-pager status --short"}}
			t0 := time.Now()
			if err := env.Client.Create(ctx, benchCommand(ns, name)); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := env.Client.Create(ctx, benchCommand(floorNS, name)); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			if err := env.Client.Create(ctx, cm); err != nil {
				b.Fatal(err)
			}
			t3 := time.Now()
			if i == -1 {
				var err error
				if before, err = scrapeWebhookHistograms(ctx, env); err != nil {
					b.Fatal(err)
				}
				if beforeServer, err = gatherServerHistograms(); err != nil {
					b.Fatal(err)
				}
				if beforeConns, err = webhookConnections(env.Env.WebhookInstallOptions.LocalServingPort); err != nil {
					b.Fatal(err)
				}
			}
			if i >= 0 {
				cmdLat, noHookLat, cmLat = append(cmdLat, t1.Sub(t0)), append(noHookLat, t2.Sub(t1)), append(cmLat, t3.Sub(t2))
			}
		}
		after, err := scrapeWebhookHistograms(ctx, env)
		if err != nil {
			b.Fatal(err)
		}
		afterServer, err := gatherServerHistograms()
		if err != nil {
			b.Fatal(err)
		}
		afterConns, err := webhookConnections(env.Env.WebhookInstallOptions.LocalServingPort)
		if err != nil {
			b.Fatal(err)
		}
		opened := 0
		for c := range afterConns {
			if !beforeConns[c] {
				opened++
			}
		}
		if len(afterConns) == 0 {
			b.Fatal("found no established connection to the webhook server in /proc/net/tcp*")
		}
		// kube-apiserver keeps its connections to the webhook server: a TLS handshake per new
		// connection, not per admission.
		b.ReportMetric(float64(opened), "webhook-conns-opened")
		b.ReportMetric(float64(len(afterConns)), "webhook-conns-open")
		apiserver, server := after.sub(before), afterServer.sub(beforeServer)
		var sumMean float64
		calls := 0
		for _, name := range slices.Sorted(maps.Keys(commandWebhooks)) {
			short := name[:1] // m or v
			h, s := apiserver[name], server[commandWebhooks[name]]
			if h.count == 0 && s.count == 0 {
				continue // not called on create
			}
			calls++
			// Exactly the measured admissions: the floor namespace's creates reached no webhook.
			if h.count != admissions || s.count != admissions {
				b.Fatalf("webhook %s: kube-apiserver counted %d calls and our server %d over %d measured creates: want exactly %d each",
					name, h.count, s.count, admissions, admissions)
			}
			sumMean += h.sum / float64(h.count)
			b.Logf("webhook %s: %d calls; kube-apiserver: %.1f%% within 5 ms, mean %.2f ms; our server: p50 %.3f ms, p99 %.3f ms, mean %.3f ms",
				name, h.count, 100*h.fractionWithin(0.005), 1000*h.sum/float64(h.count), 1000*s.quantile(0.50), 1000*s.quantile(0.99), 1000*s.sum/float64(s.count))
			b.ReportMetric(100*h.fractionWithin(0.005), "apiserver-"+short+"hook-pct-within-5ms")
			b.ReportMetric(1000*h.sum/float64(h.count), "apiserver-"+short+"hook-mean-ms")
			b.ReportMetric(1000*s.quantile(0.50), "server-"+short+"hook-p50-ms")
			b.ReportMetric(1000*s.quantile(0.99), "server-"+short+"hook-p99-ms")
		}
		if calls == 0 {
			b.Fatal("no TerminalCommand webhook was called on create")
		}
		b.ReportMetric(float64(calls), "webhook-calls-per-create")
		b.ReportMetric(1000*sumMean, "apiserver-hooks-mean-sum-ms")
		cmdLat.Report(b, "cmd-create")
		noHookLat.Report(b, "cmd-nowebhook-create")
		cmLat.Report(b, "configmap-create")
		samples.Ratio(b, "create-to-nowebhook", cmdLat, noHookLat)
		samples.Ratio(b, "create-to-configmap", cmdLat, cmLat)
		b.ReportMetric(samples.Ms(cmdLat.Quantile(0.5)-noHookLat.Quantile(0.5)), "webhooks-p50-cost-ms")
	}
}

func benchCommand(ns, name string) *wbv1.TerminalCommand {
	return &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.TerminalCommandSpec{
		SessionRef: "s", ProfileRef: "git", Argv: []string{"/usr/bin/git", "--no-pager", "status", "--short"}, Cwd: wbv1.CwdAddress{Root: "repo", Path: "src/pkg"},
		TimeoutSeconds: 60, OutputBytes: 65536,
	}}
}

func benchNamespace(b *testing.B, ctx context.Context, env *envtest.Env, labels map[string]string) string {
	b.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-", Labels: labels}}
	if err := env.Client.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	return ns.Name
}

// placedSession creates what a real command create resolves: its profile, and a session on
// an environment placed on a node and Ready (the binder labels the command with that node).
func placedSession(b *testing.B, ctx context.Context, env *envtest.Env, ns string) {
	b.Helper()
	hostPath := "/srv/work/bench/" + ns // one tenant per host directory (root-in-use)
	objs := []client.Object{
		&wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: ns}, Spec: wbv1.CommandProfileSpec{
			Executable: "/usr/bin/git", FixedArgs: []string{"--no-pager"}, AllowedArgPrefixes: []string{"status", "--short"},
			AllowedRoots: []string{"repo"}, MaxTimeoutSeconds: 120, MaxOutputBytes: 1 << 20,
		}},
		&wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: &hostPath}},
		}},
		&wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns}, Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e"}},
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	e := objs[1].(*wbv1.Environment)
	e.Status.NodeName, e.Status.Phase = "bench-node", wbv1.EnvironmentReady
	if err := env.Client.Status().Update(ctx, e); err != nil {
		b.Fatalf("placing environment %s/e: %v", ns, err)
	}
}

// excludeFloorNamespace makes the TerminalCommand webhooks skip namespaces carrying
// noWebhooksLabel (nothing else changes: same rules, same server).
func excludeFloorNamespace(b *testing.B, ctx context.Context, env *envtest.Env) {
	b.Helper()
	skip := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: noWebhooksLabel, Operator: metav1.LabelSelectorOpDoesNotExist}}}
	var muts admissionregistrationv1.MutatingWebhookConfigurationList
	var vals admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := env.Client.List(ctx, &muts); err != nil {
		b.Fatal(err)
	}
	if err := env.Client.List(ctx, &vals); err != nil {
		b.Fatal(err)
	}
	found := 0
	exclude := func(name string, sel **metav1.LabelSelector) {
		if _, ok := commandWebhooks[name]; ok {
			*sel, found = skip, found+1
		}
	}
	var configs []client.Object
	for i := range muts.Items {
		for j := range muts.Items[i].Webhooks {
			exclude(muts.Items[i].Webhooks[j].Name, &muts.Items[i].Webhooks[j].NamespaceSelector)
		}
		configs = append(configs, &muts.Items[i])
	}
	for i := range vals.Items {
		for j := range vals.Items[i].Webhooks {
			exclude(vals.Items[i].Webhooks[j].Name, &vals.Items[i].Webhooks[j].NamespaceSelector)
		}
		configs = append(configs, &vals.Items[i])
	}
	for _, c := range configs {
		if err := env.Client.Update(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	if found != len(commandWebhooks) {
		b.Fatalf("found %d of the %d TerminalCommand webhooks to exclude the floor namespace from", found, len(commandWebhooks))
	}
}

// waitWebhooksSkipped waits (bounded) until the API server applies the changed selectors:
// a command created in the floor namespace no longer gets the binder's finalizer, while one
// in the measured namespace still does.
func waitWebhooksSkipped(b *testing.B, ctx context.Context, env *envtest.Env, ns, floorNS string) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		name := fmt.Sprintf("probe%d", i)
		hooked, floor := benchCommand(ns, name), benchCommand(floorNS, name)
		for _, c := range []*wbv1.TerminalCommand{hooked, floor} {
			if err := env.Client.Create(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
		if !controllerutil.ContainsFinalizer(hooked, wbv1.CleanupFinalizer) || hooked.Labels[wbv1.NodeLabel] != "bench-node" {
			b.Fatalf("a command in %s was not bound by the mutating webhook: labels %v finalizers %v", ns, hooked.Labels, hooked.Finalizers)
		}
		if !controllerutil.ContainsFinalizer(floor, wbv1.CleanupFinalizer) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the API server still calls the TerminalCommand webhooks for namespace %s after 30 s", floorNS)
		}
		time.Sleep(100 * time.Millisecond) // the API server's webhook configuration informer has no event for us to wait on
	}
}

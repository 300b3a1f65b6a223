package nodeagent

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/samples"
)

// BenchmarkStatusWriteCost measures what one status write costs on the command's path —
// the node writes two (its claim, then start and outcome) — against a ConfigMap patch and a
// status apply of a kind whose status no admission webhook intercepts (CommandProfile),
// interleaved in one run. A TerminalCommand's status write is checked by the API server's
// own policy (config/webhook/node_status_policy.yaml; before, the webhook vterminalcommand
// was called for it); the difference between the two status applies is what that check and
// the larger object cost per write. A JSON patch of the same condition, in place, shows
// whether server-side apply is the cost.
func BenchmarkStatusWriteCost(b *testing.B) {
	ctx := context.Background()
	ns := setup(b)
	finishedCommand(ctx, b, ns, "w")
	must(b, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "wc", Namespace: ns}}))
	cond := func(v string) map[string]any {
		return map[string]any{"conditions": []any{map[string]any{"type": "BenchWrite", "status": "True", "reason": "R" + v,
			"message": "benchmark", "lastTransitionTime": "2026-01-01T00:00:00Z"}}}
	}
	apply := func(kind, name, v string) error {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": wbv1.GroupVersion.String(), "kind": kind,
			"metadata": map[string]any{"name": name, "namespace": ns}, "status": cond(v)}}
		//nolint:staticcheck // unstructured apply, as internal/statusapply does
		return env.Client.Status().Patch(ctx, u, client.Apply, client.FieldOwner("bench"), client.ForceOwnership)
	}
	var cmdApply, cmdMerge, profApply, cmPatch samples.Durations
	benchIdx := -1
	for i := 0; i < b.N; i++ {
		v := strconv.Itoa(i)
		t0 := time.Now()
		must(b, apply("TerminalCommand", "w", v))
		cmdApply = append(cmdApply, time.Since(t0))
		if benchIdx < 0 { // the apply above added the BenchWrite condition: patch it in place
			var c wbv1.TerminalCommand
			must(b, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w"}, &c))
			for j, cd := range c.Status.Conditions {
				if cd.Type == "BenchWrite" {
					benchIdx = j
				}
			}
		}
		tm := time.Now()
		must(b, env.Client.Status().Patch(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns}},
			client.RawPatch("application/json-patch+json", []byte(`[{"op":"replace","path":"/status/conditions/`+strconv.Itoa(benchIdx)+`/reason","value":"M`+v+`"}]`)),
			client.FieldOwner("bench-patch")))
		cmdMerge = append(cmdMerge, time.Since(tm))
		t1 := time.Now()
		must(b, apply("CommandProfile", "true", v))
		profApply = append(profApply, time.Since(t1))
		t2 := time.Now()
		must(b, env.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "wc", Namespace: ns}},
			client.RawPatch("application/merge-patch+json", []byte(`{"data":{"k":"`+v+`"}}`))))
		cmPatch = append(cmPatch, time.Since(t2))
	}
	cmdApply.Report(b, "command-status-apply")
	cmdMerge.Report(b, "command-status-json-patch")
	profApply.Report(b, "profile-status-apply")
	cmPatch.Report(b, "configmap-patch")
	samples.Ratio(b, "command-status-to-configmap", cmdApply, cmPatch)
	samples.Ratio(b, "command-status-to-profile-status", cmdApply, profApply)
	samples.Ratio(b, "command-status-apply-to-json-patch", cmdApply, cmdMerge)
}

// finishedCommand creates TerminalCommand name (/bin/true in session s) and returns once a
// watch shows it final: nobody else writes it any more, so a benchmark's writes to it are
// its own.
func finishedCommand(ctx context.Context, b *testing.B, ns, name string) {
	b.Helper()
	w, err := wc.Watch(ctx, &wbv1.TerminalCommandList{}, client.InNamespace(ns))
	must(b, err)
	defer w.Stop()
	must(b, env.Client.Create(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "true", Argv: []string{"/bin/true"}, Cwd: wbv1.CwdAddress{Root: "repo"}}}))
	for ev := range w.ResultChan() {
		if c, ok := ev.Object.(*wbv1.TerminalCommand); ok && ev.Type != watch.Deleted && wbv1.CommandPhaseIsFinal(c.Status.Phase) {
			return
		}
	}
}

package webhooks

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// TestBindingPatch applies the binder's hand-built JSON patch with an RFC 6902
// implementation to the command as the API server sends it, and checks the result is the
// binding: the node and environment labels set (or removed when nothing resolves, whatever
// the client sent), other labels kept, the cleanup finalizer present exactly once.
func TestBindingPatch(t *testing.T) {
	cases := []struct {
		name       string
		labels     map[string]string
		finalizers []string
		node, env  string
	}{
		{name: "bare, bound", node: "n1", env: "e"},
		{name: "bare, unbound"},
		{name: "empty labels, bound", labels: map[string]string{}, node: "n1", env: "e"},
		{name: "other labels, bound", labels: map[string]string{"app": "x", "a/b~c": "y"}, node: "n1", env: "e"},
		{name: "client-forged binding, bound elsewhere", labels: map[string]string{wbv1.NodeLabel: "evil", wbv1.EnvironmentLabel: "other", "app": "x"}, node: "n1", env: "e"},
		{name: "client-forged binding, unbound", labels: map[string]string{wbv1.NodeLabel: "evil", wbv1.EnvironmentLabel: "other"}},
		{name: "forged node only, unbound", labels: map[string]string{wbv1.NodeLabel: "evil", "app": "x"}},
		{name: "already bound (reinvoked)", labels: map[string]string{wbv1.NodeLabel: "n1", wbv1.EnvironmentLabel: "e"}, finalizers: []string{wbv1.CleanupFinalizer}, node: "n1", env: "e"},
		{name: "other finalizers", finalizers: []string{"example.com/keep"}, node: "n1", env: "e"},
		{name: "finalizer already there among others", finalizers: []string{"example.com/keep", wbv1.CleanupFinalizer}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &wbv1.TerminalCommand{
				TypeMeta:   metav1.TypeMeta{APIVersion: wbv1.GroupVersion.String(), Kind: "TerminalCommand"},
				ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", Labels: tc.labels, Finalizers: tc.finalizers},
				Spec:       wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "p", Argv: []string{"/bin/true"}},
			}
			raw, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			ops := bindingPatch(obj, tc.node, tc.env)
			patchJSON, err := json.Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			patch, err := jsonpatchapply.DecodePatch(patchJSON)
			if err != nil {
				t.Fatalf("decoding patch %s: %v", patchJSON, err)
			}
			out, err := patch.Apply(raw)
			if err != nil {
				t.Fatalf("applying patch %s: %v", patchJSON, err)
			}
			var got wbv1.TerminalCommand
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}

			wantLabels := maps.Clone(tc.labels)
			if wantLabels == nil {
				wantLabels = map[string]string{}
			}
			delete(wantLabels, wbv1.NodeLabel)
			delete(wantLabels, wbv1.EnvironmentLabel)
			if tc.node != "" {
				wantLabels[wbv1.NodeLabel], wantLabels[wbv1.EnvironmentLabel] = tc.node, tc.env
			}
			gotLabels := got.Labels
			if gotLabels == nil {
				gotLabels = map[string]string{}
			}
			if !maps.Equal(gotLabels, wantLabels) {
				t.Errorf("labels = %v, want %v (patch %s)", gotLabels, wantLabels, patchJSON)
			}
			wantFin := slices.Clone(tc.finalizers)
			if !slices.Contains(wantFin, wbv1.CleanupFinalizer) {
				wantFin = append(wantFin, wbv1.CleanupFinalizer)
			}
			if !slices.Equal(got.Finalizers, wantFin) {
				t.Errorf("finalizers = %v, want %v (patch %s)", got.Finalizers, wantFin, patchJSON)
			}
			if got.Name != obj.Name || !slices.Equal(got.Spec.Argv, obj.Spec.Argv) {
				t.Errorf("the patch changed more than the binding: %s", out)
			}
			if len(tc.labels) == len(wantLabels) && maps.Equal(tc.labels, wantLabels) && slices.Equal(tc.finalizers, wantFin) && len(ops) != 0 {
				t.Errorf("nothing to change, but the patch is %s", patchJSON)
			}
		})
	}
}

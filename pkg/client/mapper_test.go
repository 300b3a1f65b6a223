package client

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/yaml"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// TestStaticMapperMatchesCRDs checks the compiled-in mapping of every workbench kind (which
// replaces discovery on the run path) against the generated CRDs: the plural resource and
// the scope the API server serves.
func TestStaticMapperMatchesCRDs(t *testing.T) {
	files, err := filepath.Glob("../../config/crd/bases/workbench.sensorium.dev_*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs found: %v", err)
	}
	m := staticWorkbenchMapper()
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Spec struct {
				Scope string `json:"scope"`
				Names struct {
					Kind   string `json:"kind"`
					Plural string `json:"plural"`
				} `json:"names"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		kind := crd.Spec.Names.Kind
		seen[kind] = true
		mapping, err := m.RESTMapping(wbv1.GroupVersion.WithKind(kind).GroupKind(), wbv1.GroupVersion.Version)
		if err != nil {
			t.Errorf("%s: not mapped: %v", kind, err)
			continue
		}
		if mapping.Resource.Resource != crd.Spec.Names.Plural {
			t.Errorf("%s: mapped to %q, the CRD serves %q", kind, mapping.Resource.Resource, crd.Spec.Names.Plural)
		}
		want := meta.RESTScopeNameNamespace
		if crd.Spec.Scope == "Cluster" {
			want = meta.RESTScopeNameRoot
		}
		if mapping.Scope.Name() != want {
			t.Errorf("%s: mapped with scope %s, the CRD is %s", kind, mapping.Scope.Name(), crd.Spec.Scope)
		}
	}
	for kind := range clusterScopedKinds {
		if !seen[kind] {
			t.Errorf("cluster-scoped kind %s has no CRD", kind)
		}
	}
}

package environments

import (
	"context"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/fixturecopy"
	"sensorium.dev/workbench/internal/backends/hostlocal"
	"sensorium.dev/workbench/internal/platform/fixture"
)

// TestSourcesOnABackendThatDoesNotMaterialize: a sourced root on a backend that says it
// does not materialize sources (backends.MaterializesSources) is refused with
// source-backend-unsupported before anything is fetched, naming the node's backends that
// do; the backend's answer, not its name, decides.
func TestSourcesOnABackendThatDoesNotMaterialize(t *testing.T) {
	hl, fc := hostlocal.New(nil), fixturecopy.New(t.TempDir(), nil, fixture.Limits{})
	reg, err := backends.NewRegistry(hl, fc)
	if err != nil {
		t.Fatal(err)
	}
	a := New(Deps{Backends: reg})
	env := &wbv1.Environment{Spec: wbv1.EnvironmentSpec{Backend: wbv1.BackendHostLocal,
		Roots: []wbv1.EnvironmentRoot{{Name: "repo", Git: &wbv1.GitRootSource{URL: "https://example.invalid/r.git"}}}}}
	var spec backends.Spec
	_, code, msg, err := a.bindSources(context.Background(), env, hl, &spec)
	if err != nil {
		t.Fatal(err)
	}
	want := "spec.roots[0].git: backend host-local does not materialize sources (use fixture-copy.v1)"
	if code != string(actuation.CodeSourceBackendUnsupported) || msg != want {
		t.Fatalf("bindSources on host-local = %q %q, want %s %q", code, msg, actuation.CodeSourceBackendUnsupported, want)
	}
	if len(spec.Roots) != 0 {
		t.Fatalf("a refused source bound roots: %+v", spec.Roots)
	}
}

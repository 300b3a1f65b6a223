package fixturecopy

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/hostexec"
	"sensorium.dev/workbench/internal/backends/hostlocal"
	"sensorium.dev/workbench/internal/platform/fixture"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// TestOpenRefusesPTYAndExportsThroughTheManager: a fixture-copy.v1 Env runs commands and
// action classes on the host sandbox but refuses every PTY program (capability-mismatch,
// before the profile's roots are looked at); its roots export an allocated copy through
// the copy's fixture.Manager — the same bytes as the host export of the pinned root — and
// refuse (fixture-outside-managed-dir) a root that is not a managed copy, which the host
// implementation would export. It materializes sources; host-local does not.
func TestOpenRefusesPTYAndExportsThroughTheManager(t *testing.T) {
	e := newEnv(t, fixture.Limits{})
	ctx := context.Background()
	spec := e.spec("env-1", backends.Root{Name: "repo", Source: filepath.Join(e.admitted, "proj")})
	st, err := e.b.Allocate(ctx, spec)
	must(t, err)
	env, err := e.b.Open("env-1")
	must(t, err)
	if ref := env.Exec.ActionClasses(); ref != nil {
		t.Fatalf("ActionClasses = %v: the host sandbox enforces them", ref)
	}
	for _, allowed := range [][]string{{"repo"}, {"elsewhere"}, nil} {
		_, ref := env.Exec.Terminal(backends.TerminalRequest{Profile: actuation.Profile{Executable: "/bin/sh", AllowedRoots: allowed},
			Roots: st.Roots, SessionID: "s-1", Argv: []string{"/bin/sh"}})
		if ref == nil || ref.Code != actuation.CodeCapabilityMismatch || ref.Message != "fixture-copy.v1 is a managed copy, not a process sandbox: no PTY" {
			t.Fatalf("Terminal (allowed roots %v) = %v, want the no-PTY refusal", allowed, ref)
		}
	}

	mr := st.Roots[0]
	pinned, err := fsaccess.OpenRoot(mr.Path)
	must(t, err)
	t.Cleanup(func() { _ = pinned.Close() })
	f, err := env.Roots.OpenRoot(mr, func() (*fsaccess.Root, error) { return pinned, nil })
	must(t, err)
	var got, want bytes.Buffer
	if _, err := f.Export(ctx, "", &got, fixture.Limits{}); err != nil {
		t.Fatalf("export of the managed copy: %v", err)
	}
	if _, err := fixture.ExportRoot(pinned, "", &want, fixture.Limits{}); err != nil {
		t.Fatal(err)
	}
	if got.Len() == 0 || !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("the managed copy's export (%d bytes) differs from the pinned root's (%d bytes)", got.Len(), want.Len())
	}
	if r, err := f.Read(ctx, "a.txt", 0, 1<<10); err != nil || string(r.Data) != "alpha\n" {
		t.Fatalf("reads go through the host's file access: %+v %v", r, err)
	}

	// A root that is not a managed copy: the host exports it, fixture-copy refuses.
	plain := filepath.Join(e.tmp, "plain")
	must(t, os.MkdirAll(plain, 0o755))
	must(t, os.WriteFile(filepath.Join(plain, "x"), []byte("x"), 0o644))
	pr, err := fsaccess.OpenRoot(plain)
	must(t, err)
	t.Cleanup(func() { _ = pr.Close() })
	pmr := backends.MountedRoot{Name: "plain", Path: plain}
	byPin := func() (*fsaccess.Root, error) { return pr, nil }
	hf, err := hostexec.Open("env-2").Roots.OpenRoot(pmr, byPin)
	must(t, err)
	if _, err := hf.Export(ctx, "", &bytes.Buffer{}, fixture.Limits{}); err != nil {
		t.Fatalf("the host exports a plain root: %v", err)
	}
	ff, err := env.Roots.OpenRoot(pmr, byPin)
	must(t, err)
	if _, err := ff.Export(ctx, "", &bytes.Buffer{}, fixture.Limits{}); actuation.CodeOf(err) != actuation.CodeFixtureOutsideManaged {
		t.Fatalf("fixture-copy export of a root that is not a managed copy: %v, want %s", err, actuation.CodeFixtureOutsideManaged)
	}

	if !backends.MaterializesSources(e.b) || backends.MaterializesSources(hostlocal.New(nil)) {
		t.Fatal("fixture-copy.v1 materializes sources, host-local does not")
	}
	reg, err := backends.NewRegistry(hostlocal.New(nil), e.b)
	must(t, err)
	if ids := reg.SourceMaterializers(); len(ids) != 1 || ids[0] != ID {
		t.Fatalf("SourceMaterializers = %v, want [%s]", ids, ID)
	}
}

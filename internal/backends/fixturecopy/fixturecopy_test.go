package fixturecopy

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fixture"
	"sensorium.dev/workbench/internal/test/testkit"
)

var must = testkit.Must

type env struct {
	tmp, admitted, outside, state string
	b                             *Backend
}

// newEnv: <tmp>/admitted/{proj/{a.txt,sub/b.txt}, other/c.txt}, <tmp>/outside/secret,
// state dir <tmp>/state.
func newEnv(t *testing.T, lim fixture.Limits) *env {
	t.Helper()
	e := &env{tmp: t.TempDir()}
	e.admitted = filepath.Join(e.tmp, "admitted")
	e.outside = filepath.Join(e.tmp, "outside")
	e.state = filepath.Join(e.tmp, "state")
	for p, c := range map[string]string{
		"admitted/proj/a.txt":     "alpha\n",
		"admitted/proj/sub/b.txt": "beta\n",
		"admitted/other/c.txt":    "gamma\n",
		"outside/secret":          "secret\n",
	} {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(e.tmp, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(e.tmp, p), []byte(c), 0o644))
	}
	e.b = New(e.state, map[string]string{"ws": e.admitted}, lim)
	return e
}

func (e *env) spec(id string, roots ...backends.Root) backends.Spec {
	return backends.Spec{ID: id, Ref: "ns/" + id, Roots: roots}
}

// fingerprint lists every entry under dir with type, mode, size and content.
func fingerprint(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		must(t, err)
		fi, err := d.Info()
		must(t, err)
		rel, _ := filepath.Rel(dir, p)
		line := fmt.Sprintf("%s %v %d %d", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			must(t, err)
			line += " " + string(b)
		}
		lines = append(lines, line)
		return nil
	}))
	return strings.Join(lines, "\n")
}

func TestAllocateAdmission(t *testing.T) {
	e := newEnv(t, fixture.Limits{})
	must(t, os.Symlink(e.outside, filepath.Join(e.admitted, "escape")))
	must(t, os.MkdirAll(filepath.Join(e.admitted, "withlink"), 0o755))
	must(t, os.Symlink("../proj/a.txt", filepath.Join(e.admitted, "withlink", "l")))
	must(t, os.MkdirAll(filepath.Join(e.admitted, "state-inside"), 0o755))
	ctx := context.Background()
	cases := []struct {
		name string
		root backends.Root
		code string
	}{
		{"admitted", backends.Root{Name: "proj", Source: filepath.Join(e.admitted, "proj")}, ""},
		{"not admitted", backends.Root{Name: "x", Source: e.outside}, string(actuation.CodeRootNotAdmitted)},
		{"symlink escaping the admitted root", backends.Root{Name: "x", Source: filepath.Join(e.admitted, "escape")}, string(actuation.CodeRootNotAdmitted)},
		{"symlink inside the source", backends.Root{Name: "x", Source: filepath.Join(e.admitted, "withlink")}, string(actuation.CodeFixtureSymlink)},
		{"relative", backends.Root{Name: "x", Source: "admitted/proj"}, string(actuation.CodeRootInvalid)},
		{"missing", backends.Root{Name: "x", Source: filepath.Join(e.admitted, "nope")}, string(actuation.CodeRootInvalid)},
		{"hostPath instead", backends.Root{Name: "x", HostPath: filepath.Join(e.admitted, "proj")}, string(actuation.CodeRootInvalid)},
		{"empty source", backends.Root{Name: "x"}, string(actuation.CodeRootInvalid)},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := e.b.Allocate(ctx, e.spec(fmt.Sprintf("id-%d", i), c.root))
			if got := string(actuation.CodeOf(err)); got != c.code {
				t.Fatalf("code = %q (err %v), want %q", got, err, c.code)
			}
			if c.code != "" {
				if st.Phase != backends.PhaseFailed {
					t.Fatalf("phase = %s", st.Phase)
				}
				// Nothing left behind for a refused allocation.
				if m, _ := filepath.Glob(filepath.Join(e.state, "fixtures", fmt.Sprintf("id-%d", i), "*", "fx-*")); len(m) != 0 {
					t.Fatalf("refused allocation left copies: %v", m)
				}
				return
			}
			if st.Phase != backends.PhaseReady || len(st.Roots) != 1 {
				t.Fatalf("status = %+v", st)
			}
		})
	}
	// Bad IDs never become directory names.
	for _, id := range []string{"", "..", ".hidden", "a/b", strings.Repeat("x", MaxIDBytes+1)} {
		if _, err := e.b.Allocate(ctx, e.spec(id, backends.Root{Name: "p", Source: filepath.Join(e.admitted, "proj")})); actuation.CodeOf(err) != actuation.CodeRootInvalid {
			t.Fatalf("ID %q: %v", id, err)
		}
	}
	// A source containing the state directory is refused.
	inner := New(filepath.Join(e.admitted, "state-inside", "st"), map[string]string{"ws": e.admitted}, fixture.Limits{})
	if _, err := inner.Allocate(ctx, e.spec("ov", backends.Root{Name: "p", Source: e.admitted})); actuation.CodeOf(err) != actuation.CodeRootNotAdmitted {
		t.Fatalf("overlapping state dir: %v", err)
	}
}

func TestAllocateCapsRefuseAndRollBack(t *testing.T) {
	e := newEnv(t, fixture.Limits{MaxBytes: 8})
	ctx := context.Background()
	sp := e.spec("env-caps",
		backends.Root{Name: "other", Source: filepath.Join(e.admitted, "other")}, // 6 bytes: fits
		backends.Root{Name: "proj", Source: filepath.Join(e.admitted, "proj")},   // 11 bytes: too large
	)
	st, err := e.b.Allocate(ctx, sp)
	if actuation.CodeOf(err) != actuation.CodeFixtureTooLarge || st.Phase != backends.PhaseFailed {
		t.Fatalf("allocate = %+v, %v", st, err)
	}
	if m, _ := filepath.Glob(filepath.Join(e.state, "fixtures", "env-caps", "*", "*")); len(m) != 0 {
		t.Fatalf("copies left after a refused allocation: %v", m)
	}
}

func TestIdempotentAllocateAndPartialRedo(t *testing.T) {
	e := newEnv(t, fixture.Limits{})
	ctx := context.Background()
	src := filepath.Join(e.admitted, "proj")
	before := fingerprint(t, e.admitted)
	sp := e.spec("env-1", backends.Root{Name: "proj", Source: src})
	st, err := e.b.Allocate(ctx, sp)
	must(t, err)
	if st.Phase != backends.PhaseReady {
		t.Fatalf("allocate: %+v", st)
	}
	cp := st.Roots[0].Path
	if filepath.Dir(cp) != filepath.Join(e.state, "fixtures", "env-1", "proj") || !strings.HasPrefix(filepath.Base(cp), fixture.CopyPrefix) {
		t.Fatalf("copy path %q", cp)
	}
	if b, err := os.ReadFile(filepath.Join(cp, "sub", "b.txt")); err != nil || string(b) != "beta\n" {
		t.Fatalf("copied content %q %v", b, err)
	}
	// The environment writes to its copy; a second Allocate (and Start) reuses it.
	must(t, os.WriteFile(filepath.Join(cp, "a.txt"), []byte("edited\n"), 0o644))
	for _, f := range []func(context.Context, backends.Spec) (backends.Status, error){e.b.Allocate, e.b.Start, e.b.Inspect} {
		st2, err := f(ctx, sp)
		must(t, err)
		if st2.Phase != backends.PhaseReady || st2.Roots[0].Path != cp {
			t.Fatalf("second call: %+v (want reuse of %s)", st2, cp)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(cp, "a.txt")); string(b) != "edited\n" {
		t.Fatalf("reuse lost the environment's write: %q", b)
	}
	if after := fingerprint(t, e.admitted); after != before {
		t.Fatalf("source changed:\n%s\n---\n%s", before, after)
	}

	// A partial copy (no completion record, plus a staging leftover) is removed and redone.
	rootDir := filepath.Dir(cp)
	must(t, os.Remove(filepath.Join(rootDir, RecordName)))
	must(t, os.Mkdir(filepath.Join(rootDir, fixture.StagingPrefix+"leftover"), 0o700))
	if st, _ := e.b.Inspect(ctx, sp); st.Phase != backends.PhaseFailed {
		t.Fatalf("inspect of a partial copy: %+v", st)
	}
	st3, err := e.b.Allocate(ctx, sp)
	must(t, err)
	if st3.Roots[0].Path == cp {
		t.Fatal("partial copy was reused")
	}
	ents, _ := os.ReadDir(rootDir)
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	if len(names) != 2 || names[0] != RecordName || names[1] != filepath.Base(st3.Roots[0].Path) {
		t.Fatalf("root dir after redo = %v", names)
	}
	if b, _ := os.ReadFile(filepath.Join(st3.Roots[0].Path, "a.txt")); string(b) != "alpha\n" {
		t.Fatalf("redone copy content %q", b)
	}

	// Inspect sees a vanished copy.
	must(t, os.RemoveAll(st3.Roots[0].Path))
	if st, err := e.b.Inspect(ctx, sp); err != nil || st.Phase != backends.PhaseFailed || st.Message == "" {
		t.Fatalf("inspect after removal: %+v %v", st, err)
	}
}

func TestTeardownRemovesOnlyManagedCopies(t *testing.T) {
	e := newEnv(t, fixture.Limits{})
	ctx := context.Background()
	before := fingerprint(t, e.admitted)
	sp1 := e.spec("env-1",
		backends.Root{Name: "proj", Source: filepath.Join(e.admitted, "proj")},
		backends.Root{Name: "other", Source: filepath.Join(e.admitted, "other")})
	sp2 := e.spec("env-2", backends.Root{Name: "proj", Source: filepath.Join(e.admitted, "proj")})
	st1, err := e.b.Allocate(ctx, sp1)
	must(t, err)
	st2, err := e.b.Allocate(ctx, sp2)
	must(t, err)
	// The environment planted a symlink to the source inside its copy: teardown
	// must unlink it, never follow it.
	must(t, os.Symlink(e.admitted, filepath.Join(st1.Roots[0].Path, "to-source")))

	if st, err := e.b.Drain(ctx, sp1); err != nil || st.Phase != backends.PhaseDraining {
		t.Fatalf("drain: %+v %v", st, err)
	}
	if st, _ := e.b.Inspect(ctx, sp1); st.Phase != backends.PhaseDraining {
		t.Fatalf("inspect after drain: %+v", st)
	}
	for i := 0; i < 2; i++ { // idempotent
		st, err := e.b.Teardown(ctx, sp1)
		must(t, err)
		if st.Phase != backends.PhaseClosed || len(st.Residue) != 0 {
			t.Fatalf("teardown #%d: %+v", i, st)
		}
	}
	if _, err := os.Lstat(filepath.Join(e.state, "fixtures", "env-1")); !os.IsNotExist(err) {
		t.Fatalf("env-1 dir still present: %v", err)
	}
	if after := fingerprint(t, e.admitted); after != before {
		t.Fatalf("source changed by teardown:\n%s\n---\n%s", before, after)
	}
	// The other environment's copy is intact.
	if st, err := e.b.Inspect(ctx, sp2); err != nil || st.Phase != backends.PhaseReady || st.Roots[0].Path != st2.Roots[0].Path {
		t.Fatalf("env-2 after env-1 teardown: %+v %v", st, err)
	}

	// Something teardown does not recognise stays and is reported.
	stray := filepath.Join(e.state, "fixtures", "env-2", "stray.txt")
	must(t, os.WriteFile(stray, []byte("not ours"), 0o600))
	st, err := e.b.Teardown(ctx, sp2)
	must(t, err)
	if st.Phase != backends.PhaseClosed || len(st.Residue) != 1 || st.Residue[0] != stray {
		t.Fatalf("teardown with stray file: %+v", st)
	}
	if _, err := os.Stat(st2.Roots[0].Path); !os.IsNotExist(err) {
		t.Fatalf("env-2 copy still present: %v", err)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Fatalf("stray file removed: %v", err)
	}
}

func TestRecoverSweepsUnknown(t *testing.T) {
	e := newEnv(t, fixture.Limits{})
	ctx := context.Background()
	src := filepath.Join(e.admitted, "proj")
	keep := e.spec("keep", backends.Root{Name: "proj", Source: src})
	gone := e.spec("gone", backends.Root{Name: "proj", Source: src})
	stKeep, err := e.b.Allocate(ctx, keep)
	must(t, err)
	stGone, err := e.b.Allocate(ctx, gone)
	must(t, err)
	fx := filepath.Join(e.state, "fixtures")
	// Leftovers of an interrupted agent: a staging dir in a known root, a
	// root the spec no longer names, a stray file at the top.
	staging := filepath.Join(fx, "keep", "proj", fixture.StagingPrefix+"0123")
	must(t, os.Mkdir(staging, 0o700))
	must(t, os.MkdirAll(filepath.Join(fx, "keep", "dropped", "fx-1"), 0o700))
	must(t, os.WriteFile(filepath.Join(fx, "stray"), nil, 0o600))
	// A symlink planted inside the unknown copy must not be followed.
	must(t, os.Symlink(e.admitted, filepath.Join(stGone.Roots[0].Path, "to-source")))
	before := fingerprint(t, e.admitted)

	acts, err := New(e.state, map[string]string{"ws": e.admitted}, fixture.Limits{}).Recover(ctx, map[string]backends.Spec{"keep": keep})
	must(t, err)
	got := map[string]string{}
	for _, a := range acts {
		got[a.Resource] = a.Outcome
	}
	want := map[string]string{
		filepath.Join(fx, "gone"):            "terminated",
		filepath.Join(fx, "stray"):           "terminated",
		staging:                              "terminated",
		filepath.Join(fx, "keep", "dropped"): "terminated",
		stKeep.Roots[0].Path:                 "recovered",
	}
	if fmt.Sprint(sortedMap(got)) != fmt.Sprint(sortedMap(want)) {
		t.Fatalf("actions = %v\nwant      %v", sortedMap(got), sortedMap(want))
	}
	for _, p := range []string{filepath.Join(fx, "gone"), staging, filepath.Join(fx, "stray"), filepath.Join(fx, "keep", "dropped")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s still present: %v", p, err)
		}
	}
	if st, err := e.b.Inspect(ctx, keep); err != nil || st.Phase != backends.PhaseReady || st.Roots[0].Path != stKeep.Roots[0].Path {
		t.Fatalf("known environment after recover: %+v %v", st, err)
	}
	if after := fingerprint(t, e.admitted); after != before {
		t.Fatal("recover changed the source")
	}
	// A second sweep finds only the kept copy.
	acts, err = e.b.Recover(ctx, map[string]backends.Spec{"keep": keep})
	must(t, err)
	if len(acts) != 1 || acts[0].Outcome != "recovered" {
		t.Fatalf("second sweep = %+v", acts)
	}
}

func sortedMap(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func TestCopyOutlivesItsSource(t *testing.T) {
	e := newEnv(t, fixture.Limits{})
	ctx := context.Background()
	src := filepath.Join(e.admitted, "proj")
	sp := e.spec("env-1", backends.Root{Name: "proj", Source: src})
	st, err := e.b.Allocate(ctx, sp)
	must(t, err)
	must(t, os.RemoveAll(src))
	// The copy is the environment's now: Inspect and a re-driven Allocate
	// (agent restart) keep using it without the source.
	for _, f := range []func(context.Context, backends.Spec) (backends.Status, error){e.b.Inspect, e.b.Allocate} {
		st2, err := f(ctx, sp)
		if err != nil || st2.Phase != backends.PhaseReady || st2.Roots[0].Path != st.Roots[0].Path {
			t.Fatalf("after source removal: %+v %v", st2, err)
		}
	}
	// A second root whose source is not admitted refuses before anything is copied.
	sp2 := e.spec("env-2",
		backends.Root{Name: "other", Source: filepath.Join(e.admitted, "other")},
		backends.Root{Name: "bad", Source: e.outside})
	if _, err := e.b.Allocate(ctx, sp2); actuation.CodeOf(err) != actuation.CodeRootNotAdmitted {
		t.Fatalf("mixed roots: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(e.state, "fixtures", "env-2", "*", "*")); len(m) != 0 {
		t.Fatalf("refused allocation left: %v", m)
	}
}

package hostlocal

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/test/testkit"
)

var must = testkit.Must

func spec(roots ...backends.Root) backends.Spec {
	return backends.Spec{ID: "env-1", Ref: "ns/env", Roots: roots}
}

// tree: <tmp>/admitted/{work/sub, file}, <tmp>/outside, <tmp>/link-admitted -> admitted
func tree(t *testing.T) (tmp, admitted, outside string) {
	t.Helper()
	tmp = t.TempDir()
	admitted = filepath.Join(tmp, "admitted")
	outside = filepath.Join(tmp, "outside")
	must(t, os.MkdirAll(filepath.Join(admitted, "work", "sub"), 0o755))
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.WriteFile(filepath.Join(admitted, "file"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(admitted, "work", "keep.txt"), []byte("keep"), 0o644))
	return tmp, admitted, outside
}

func TestAllocateAdmission(t *testing.T) {
	tmp, admitted, outside := tree(t)
	// The admitted root itself is configured through a symlink: both sides resolve.
	link := filepath.Join(tmp, "link-admitted")
	must(t, os.Symlink(admitted, link))
	// An escaping symlink inside the admitted root.
	must(t, os.Symlink(outside, filepath.Join(admitted, "escape")))
	// A symlink inside that stays inside.
	must(t, os.Symlink(filepath.Join(admitted, "work"), filepath.Join(admitted, "inner-link")))
	// A sibling whose name shares the admitted prefix.
	must(t, os.MkdirAll(admitted+"-evil", 0o755))

	b := New(map[string]string{"ws": link, "bad-rel": "relative/dir", "root": "/"})
	cases := []struct {
		name string
		root backends.Root
		code string
	}{
		{"admitted root itself", backends.Root{Name: "a", HostPath: admitted}, ""},
		{"subdir", backends.Root{Name: "a", HostPath: filepath.Join(admitted, "work", "sub")}, ""},
		// Symlinked paths are mounted as the directory they resolved to when admitted.
		{"inner symlink staying inside", backends.Root{Name: "a", HostPath: filepath.Join(admitted, "inner-link")}, ""},
		{"via admitted symlink path", backends.Root{Name: "a", HostPath: filepath.Join(link, "work")}, ""},
		{"outside", backends.Root{Name: "a", HostPath: outside}, string(actuation.CodeRootNotAdmitted)},
		{"prefix sibling", backends.Root{Name: "a", HostPath: admitted + "-evil"}, string(actuation.CodeRootNotAdmitted)},
		{"symlink escaping", backends.Root{Name: "a", HostPath: filepath.Join(admitted, "escape")}, string(actuation.CodeRootNotAdmitted)},
		{"filesystem root", backends.Root{Name: "a", HostPath: "/"}, string(actuation.CodeRootNotAdmitted)},
		{"empty", backends.Root{Name: "a"}, string(actuation.CodeRootInvalid)},
		{"relative", backends.Root{Name: "a", HostPath: "admitted/work"}, string(actuation.CodeRootInvalid)},
		{"unclean", backends.Root{Name: "a", HostPath: admitted + "/work/../work"}, string(actuation.CodeRootInvalid)},
		{"trailing slash", backends.Root{Name: "a", HostPath: admitted + "/"}, string(actuation.CodeRootInvalid)},
		{"missing", backends.Root{Name: "a", HostPath: filepath.Join(admitted, "nope")}, string(actuation.CodeRootInvalid)},
		{"a file", backends.Root{Name: "a", HostPath: filepath.Join(admitted, "file")}, string(actuation.CodeRootInvalid)},
		{"bad name", backends.Root{Name: "A_b", HostPath: admitted}, string(actuation.CodeRootInvalid)},
		{"source instead", backends.Root{Name: "a", Source: admitted}, string(actuation.CodeRootInvalid)},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := b.Allocate(ctx, spec(c.root))
			if got := string(actuation.CodeOf(err)); got != c.code {
				t.Fatalf("code = %q (err %v), want %q", got, err, c.code)
			}
			if c.code == "" {
				want, _ := filepath.EvalSymlinks(c.root.HostPath)
				if st.Phase != backends.PhaseReady || len(st.Roots) != 1 || st.Roots[0].Path != want {
					t.Fatalf("status = %+v", st)
				}
			} else if st.Phase != backends.PhaseFailed {
				t.Fatalf("phase = %s, want Failed", st.Phase)
			}
		})
	}
	if _, err := b.Allocate(ctx, spec()); actuation.CodeOf(err) != actuation.CodeRootInvalid {
		t.Fatalf("no roots: %v", err)
	}
	dup := spec(backends.Root{Name: "a", HostPath: admitted}, backends.Root{Name: "a", HostPath: admitted})
	if _, err := b.Allocate(ctx, dup); actuation.CodeOf(err) != actuation.CodeRootInvalid {
		t.Fatalf("duplicate root: %v", err)
	}
	// Nested, containing or identical roots (also through a symlink) are refused.
	for _, pair := range [][2]string{
		{admitted, filepath.Join(admitted, "work")},
		{filepath.Join(admitted, "work", "sub"), filepath.Join(admitted, "work")},
		{filepath.Join(admitted, "work"), filepath.Join(admitted, "inner-link")},
	} {
		st, err := b.Allocate(ctx, spec(backends.Root{Name: "a", HostPath: pair[0]}, backends.Root{Name: "b", HostPath: pair[1]}))
		if actuation.CodeOf(err) != actuation.CodeRootOverlap || st.Phase != backends.PhaseFailed {
			t.Fatalf("overlapping roots %v: %v (%+v)", pair, err, st)
		}
	}
	if _, err := b.Allocate(ctx, spec(backends.Root{Name: "a", HostPath: filepath.Join(admitted, "work", "sub")},
		backends.Root{Name: "b", HostPath: admitted + "-evil"})); actuation.CodeOf(err) != actuation.CodeRootNotAdmitted {
		t.Fatalf("prefix sibling is not nested, it is refused for admission only: %v", err)
	}
	// No admitted roots at all: everything is refused.
	if _, err := New(nil).Allocate(ctx, spec(backends.Root{Name: "a", HostPath: admitted})); actuation.CodeOf(err) != actuation.CodeRootNotAdmitted {
		t.Fatalf("nothing admitted: %v", err)
	}
	probs := map[string]string{}
	for _, a := range b.AdmittedRoots() {
		probs[a.Name] = a.Problem
	}
	if probs["ws"] != "" || probs["bad-rel"] == "" || probs["root"] == "" {
		t.Fatalf("admitted problems = %v", probs)
	}
}

func TestLifecycleLeavesHostUntouched(t *testing.T) {
	_, admitted, _ := tree(t)
	b := New(map[string]string{"ws": admitted})
	ctx := context.Background()
	work := filepath.Join(admitted, "work")
	sp := spec(backends.Root{Name: "work", HostPath: work, ReadOnly: true})
	for i := 0; i < 2; i++ { // idempotent
		st, err := b.Allocate(ctx, sp)
		must(t, err)
		if st.Phase != backends.PhaseReady || !st.Roots[0].ReadOnly {
			t.Fatalf("allocate #%d: %+v", i, st)
		}
	}
	st, err := b.Start(ctx, sp)
	must(t, err)
	if st.Phase != backends.PhaseReady {
		t.Fatalf("start: %+v", st)
	}
	st, err = b.Drain(ctx, sp)
	must(t, err)
	if st.Phase != backends.PhaseDraining {
		t.Fatalf("drain: %+v", st)
	}
	if st, _ = b.Inspect(ctx, sp); st.Phase != backends.PhaseDraining {
		t.Fatalf("inspect after drain: %+v", st)
	}
	for i := 0; i < 2; i++ {
		st, err = b.Teardown(ctx, sp)
		must(t, err)
		if st.Phase != backends.PhaseClosed || len(st.Residue) != 0 {
			t.Fatalf("teardown #%d: %+v", i, st)
		}
	}
	data, err := os.ReadFile(filepath.Join(work, "keep.txt"))
	if err != nil || string(data) != "keep" {
		t.Fatalf("host file after teardown: %q, %v", data, err)
	}
	if fi, err := os.Stat(filepath.Join(work, "sub")); err != nil || !fi.IsDir() {
		t.Fatalf("host dir after teardown: %v", err)
	}
	acts, err := b.Recover(ctx, nil)
	if err != nil || len(acts) != 0 {
		t.Fatalf("recover = %v, %v; want nothing", acts, err)
	}
}

func TestInspectObservesRemovalAndEscape(t *testing.T) {
	tmp, admitted, outside := tree(t)
	b := New(map[string]string{"ws": admitted})
	ctx := context.Background()
	work := filepath.Join(admitted, "work")
	sp := spec(backends.Root{Name: "work", HostPath: work})
	_, err := b.Allocate(ctx, sp)
	must(t, err)
	if st, err := b.Inspect(ctx, sp); err != nil || st.Phase != backends.PhaseReady {
		t.Fatalf("inspect = %+v, %v", st, err)
	}
	// Moved away: Failed with a message.
	must(t, os.Rename(work, filepath.Join(tmp, "moved")))
	st, err := b.Inspect(ctx, sp)
	must(t, err)
	if st.Phase != backends.PhaseFailed || st.Message == "" {
		t.Fatalf("inspect after removal = %+v", st)
	}
	// Replaced by a symlink leaving the admitted root: Failed again.
	must(t, os.Symlink(outside, work))
	st, err = b.Inspect(ctx, sp)
	must(t, err)
	if st.Phase != backends.PhaseFailed {
		t.Fatalf("inspect after symlink swap = %+v", st)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Fatal(err)
	}
}

func TestRegistry(t *testing.T) {
	r, err := backends.NewRegistry(New(nil))
	must(t, err)
	if _, ok := r.Get("host-local"); !ok {
		t.Fatal("host-local not registered")
	}
}

package treehash

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/test/testkit"
)

func write(t *testing.T, dir, rel, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func tree(t *testing.T) string {
	dir := t.TempDir()
	write(t, dir, "a.txt", "alpha\n", 0o644)
	write(t, dir, "src/main.go", "package main\n", 0o644)
	write(t, dir, "bin/run", "#!/bin/true\n", 0o755)
	if err := os.Symlink("a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func state(t *testing.T, lim Limits, dirs map[string]string) (*State, error) {
	t.Helper()
	roots := map[string]*fsaccess.Root{}
	for name, d := range dirs {
		r, err := fsaccess.OpenRoot(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		roots[name] = r
	}
	return HashHostRoots(roots, lim)
}

func mustState(t *testing.T, dirs map[string]string) *State {
	t.Helper()
	s, err := state(t, Limits{}, dirs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSameTreeSameDigestAnywhere(t *testing.T) {
	a, b := tree(t), tree(t)
	// Times never enter the hash.
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(b, "a.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	sa, sb := mustState(t, map[string]string{"work": a}), mustState(t, map[string]string{"work": b})
	if sa.Digest != sb.Digest {
		t.Fatalf("copies hash differently: %s vs %s", sa.Digest, sb.Digest)
	}
	if len(sa.Entries) != 6 { // root, a.txt, bin, bin/run, link, src, src/main.go minus? count below
		t.Logf("entries: %+v", sa.Entries)
	}
	paths := map[string]Entry{}
	for _, e := range sa.Entries {
		paths[e.Path] = e
	}
	for _, p := range []string{"work", "work/a.txt", "work/bin", "work/bin/run", "work/link", "work/src", "work/src/main.go"} {
		if _, ok := paths[p]; !ok {
			t.Errorf("entry %q missing from %v", p, sa.Entries)
		}
	}
	if paths["work/bin/run"].Mode != 0o755 || paths["work/a.txt"].Mode != 0o644 {
		t.Errorf("modes not recorded: %+v", paths)
	}
	if paths["work"].Digest != sa.Roots[0].Digest {
		t.Errorf("root entry digest %s != root digest %s", paths["work"].Digest, sa.Roots[0].Digest)
	}
}

func TestEveryChangeChangesTheDigest(t *testing.T) {
	base := mustState(t, map[string]string{"work": tree(t)}).Digest
	cases := map[string]func(dir string){
		"content":   func(d string) { write(t, d, "src/main.go", "package other\n", 0o644) },
		"mode":      func(d string) { must(t, os.Chmod(filepath.Join(d, "a.txt"), 0o600)) },
		"new file":  func(d string) { write(t, d, "src/new.go", "", 0o644) },
		"removed":   func(d string) { must(t, os.Remove(filepath.Join(d, "bin/run"))) },
		"empty dir": func(d string) { must(t, os.Mkdir(filepath.Join(d, "empty"), 0o755)) },
		"symlink target": func(d string) {
			must(t, os.Remove(filepath.Join(d, "link")))
			must(t, os.Symlink("src/main.go", filepath.Join(d, "link")))
		},
		"rename": func(d string) { must(t, os.Rename(filepath.Join(d, "a.txt"), filepath.Join(d, "b.txt"))) },
	}
	seen := map[string]string{base: "base"}
	for name, mutate := range cases {
		d := tree(t)
		mutate(d)
		s := mustState(t, map[string]string{"work": d})
		if prev, dup := seen[s.Digest]; dup {
			t.Errorf("%s: digest equals that of %s", name, prev)
		}
		seen[s.Digest] = name
	}
}

func TestRootNamesEnterTheDigest(t *testing.T) {
	d := tree(t)
	a := mustState(t, map[string]string{"work": d})
	b := mustState(t, map[string]string{"other": d})
	if a.Digest == b.Digest {
		t.Fatal("a root's name must enter the state digest")
	}
	two := mustState(t, map[string]string{"work": d, "other": tree(t)})
	if len(two.Roots) != 2 || two.Roots[0].Name != "other" {
		t.Fatalf("roots not sorted: %+v", two.Roots)
	}
}

func TestCapsRefuse(t *testing.T) {
	d := tree(t)
	_, err := state(t, Limits{MaxEntries: 3}, map[string]string{"work": d})
	if actuation.CodeOf(err) != actuation.CodeStateTreeTooLarge {
		t.Fatalf("entry cap: got %v, want %s", err, string(actuation.CodeStateTreeTooLarge))
	}
	_, err = state(t, Limits{MaxBytes: 10}, map[string]string{"work": d})
	if actuation.CodeOf(err) != actuation.CodeStateTreeTooLarge {
		t.Fatalf("byte cap: got %v, want %s", err, string(actuation.CodeStateTreeTooLarge))
	}
	_, err = state(t, Limits{MaxFile: 4}, map[string]string{"work": d})
	if actuation.CodeOf(err) != actuation.CodeStateTreeTooLarge {
		t.Fatalf("file cap: got %v, want %s", err, string(actuation.CodeStateTreeTooLarge))
	}
	// Exactly at the cap is accepted: 6 entries below the root.
	if _, err := state(t, Limits{MaxEntries: 6}, map[string]string{"work": d}); err != nil {
		t.Fatalf("at the cap: %v", err)
	}
}

func TestDiff(t *testing.T) {
	d := tree(t)
	before := mustState(t, map[string]string{"work": d})
	write(t, d, "a.txt", "changed\n", 0o644)
	write(t, d, "src/new.go", "x", 0o644)
	must(t, os.Remove(filepath.Join(d, "bin/run")))
	after := mustState(t, map[string]string{"work": d})
	ch := Diff(before.Entries, after.Entries)
	got := []string{}
	for _, c := range ch {
		kind := "changed"
		if c.Before == nil {
			kind = "added"
		} else if c.After == nil {
			kind = "removed"
		}
		got = append(got, kind+" "+c.Path)
	}
	want := []string{"changed work/a.txt", "removed work/bin/run", "added work/src/new.go"}
	if len(got) != len(want) {
		t.Fatalf("diff = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("diff = %v, want %v", got, want)
		}
	}
	if len(Diff(after.Entries, after.Entries)) != 0 {
		t.Fatal("a state must not differ from itself")
	}
}

var must = testkit.Must

package waits

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

func newWatcher(t testing.TB, c WatchCaps) *FileWatcher {
	t.Helper()
	w, err := NewFileWatcher(c)
	if actuation.CodeOf(err) == actuation.CodeWatchUnavailable {
		t.Skipf("inotify unavailable on this kernel: %v", err)
	}
	must(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func openRoot(t testing.TB, dir string) *fsaccess.Root {
	t.Helper()
	r, err := fsaccess.OpenRoot(dir)
	if actuation.CodeOf(err) == actuation.CodeOpenat2Unavailable {
		t.Skipf("openat2 unavailable: %v", err)
	}
	must(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func pendingFor(t *testing.T, h *Handle, d time.Duration) {
	t.Helper()
	select {
	case <-h.Done():
		r, _ := h.Result()
		t.Fatalf("wait ended early: %+v", r)
	case <-time.After(d):
	}
}

func TestFileExistsViaInotify(t *testing.T) {
	dir := t.TempDir()
	root := openRoot(t, dir)
	w := newWatcher(t, WatchCaps{})
	e := newEngine(t, Caps{})
	// Neither the file nor its parents exist yet: the watch starts on the
	// root and moves down as directories appear.
	src, err := w.Source(root, "out/logs/ready.flag")
	must(t, err)
	h, err := e.Register(context.Background(), Request{ID: "w-exists", Kind: KindFileExists, Deadline: deadline(testTimeout), Source: src})
	must(t, err)
	pendingFor(t, h, 150*time.Millisecond)
	must(t, os.MkdirAll(filepath.Join(dir, "out", "logs"), 0o755))
	pendingFor(t, h, 150*time.Millisecond)
	must(t, os.WriteFile(filepath.Join(dir, "out", "logs", "other"), nil, 0o644)) // unrelated name: no wake-up
	pendingFor(t, h, 100*time.Millisecond)
	evalsBefore := func() int { _, n := h.Last(); return n }()
	must(t, os.WriteFile(filepath.Join(dir, "out", "logs", "ready.flag"), []byte("1"), 0o644))
	r := result(t, h)
	if r.Status != StatusSatisfied {
		t.Fatalf("result %+v", r)
	}
	if r.Evaluations > evalsBefore+3 || r.Evaluations > 12 {
		t.Fatalf("%d evaluations (%d before the file appeared): not event-driven", r.Evaluations, evalsBefore)
	}
	// The engine released the subscription when the wait ended.
	if _, subs := w.Counts(); subs != 0 {
		t.Fatalf("%d subscriptions left", subs)
	}
	t.Logf("file.exists satisfied after %s with %d evaluations", r.Duration, r.Evaluations)
}

func TestDigestChanged(t *testing.T) {
	dir := t.TempDir()
	root := openRoot(t, dir)
	w := newWatcher(t, WatchCaps{})
	e := newEngine(t, Caps{})
	p := filepath.Join(dir, "config.yaml")
	must(t, os.WriteFile(p, []byte("a: 1\n"), 0o644))
	prev := fsaccess.DigestBytes([]byte("a: 1\n"))

	src, err := w.Source(root, "config.yaml")
	must(t, err)
	h, err := e.Register(context.Background(), Request{ID: "w-digest", Kind: KindDigestChanged, Deadline: deadline(testTimeout), PrevDigest: prev, Source: src})
	must(t, err)
	pendingFor(t, h, 100*time.Millisecond)
	must(t, os.Chtimes(p, time.Now(), time.Now())) // touched, same content: still pending
	pendingFor(t, h, 100*time.Millisecond)
	// Replaced atomically: a non-atomic rewrite may legitimately satisfy
	// the wait on an intermediate state (e.g. the truncated, empty file).
	must(t, os.WriteFile(p+".tmp", []byte("a: 2\n"), 0o644))
	must(t, os.Rename(p+".tmp", p))
	r := result(t, h)
	if r.Status != StatusSatisfied || r.Observation.Digest != fsaccess.DigestBytes([]byte("a: 2\n")) {
		t.Fatalf("result %+v", r)
	}

	// "" = previously absent: the file's appearance is the change.
	src, err = w.Source(root, "new.txt")
	must(t, err)
	h, err = e.Register(context.Background(), Request{ID: "w-digest-new", Kind: KindDigestChanged, Deadline: deadline(testTimeout), Source: src})
	must(t, err)
	pendingFor(t, h, 100*time.Millisecond)
	tmp := filepath.Join(dir, ".new.tmp")
	must(t, os.WriteFile(tmp, []byte("hello"), 0o644))
	must(t, os.Rename(tmp, filepath.Join(dir, "new.txt")))
	if r := result(t, h); r.Status != StatusSatisfied || r.Observation.Digest != fsaccess.DigestBytes([]byte("hello")) {
		t.Fatalf("appearance %+v", r)
	}

	// Probe: pass / fail now.
	pr, err := e.Probe(context.Background(), Request{ID: "p-exists", Kind: KindFileExists, Source: FileSource(root, "new.txt", nil)}, 0)
	must(t, err)
	if pr.Result != ProbePass {
		t.Fatalf("probe %+v", pr)
	}
	pr, err = e.Probe(context.Background(), Request{ID: "p-missing", Kind: KindFileExists, Source: FileSource(root, "nope/x", nil)}, 0)
	must(t, err)
	if pr.Result != ProbeFail {
		t.Fatalf("probe %+v", pr)
	}
}

func TestFileSymlinkEscapeAndCaps(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600))
	must(t, os.Symlink(outside, filepath.Join(dir, "escape")))
	root := openRoot(t, dir)
	w := newWatcher(t, WatchCaps{MaxWatches: 1, MaxSubscriptions: 2})
	e := newEngine(t, Caps{})

	_, err := w.Subscribe(root, "escape/secret")
	wantCode(t, err, string(actuation.CodeSymlinkEscape))
	_, err = w.Subscribe(root, "../x")
	wantCode(t, err, string(actuation.CodePathTraversal))
	// The observation itself refuses too (a wait Fails with the code).
	h, err := e.Register(context.Background(), Request{ID: "w-escape", Kind: KindFileExists, Deadline: deadline(testTimeout), Source: FileSource(root, "escape/secret", nil)})
	must(t, err)
	if r := result(t, h); r.Status != StatusFailed || actuation.CodeOf(r.Err) != actuation.CodeSymlinkEscape {
		t.Fatalf("escape %+v", r)
	}

	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	s1, err := w.Subscribe(root, "a")
	must(t, err)
	_, err = w.Subscribe(root, "sub/b") // a second directory
	wantCode(t, err, string(actuation.CodeWatchCapReached))
	s2, err := w.Subscribe(root, "b") // same directory: shares the watch
	must(t, err)
	_, err = w.Subscribe(root, "c")
	wantCode(t, err, string(actuation.CodeWatchCapReached))
	if watches, subs := w.Counts(); watches != 1 || subs != 2 {
		t.Fatalf("counts %d/%d", watches, subs)
	}
	s1.Close()
	s2.Close()
	s2.Close()
	if watches, subs := w.Counts(); watches != 0 || subs != 0 {
		t.Fatalf("counts after close %d/%d", watches, subs)
	}

	// A closed watcher fails its waits instead of leaving them silent.
	w2 := newWatcher(t, WatchCaps{})
	src, err := w2.Source(root, "late")
	must(t, err)
	h, err = e.Register(context.Background(), Request{ID: "w-closed", Kind: KindFileExists, Deadline: deadline(testTimeout), Source: src})
	must(t, err)
	must(t, w2.Close())
	if r := result(t, h); r.Status != StatusFailed || actuation.CodeOf(r.Err) != actuation.CodeWatchUnavailable {
		t.Fatalf("closed watcher %+v", r)
	}
	_, err = w2.Subscribe(root, "x")
	wantCode(t, err, string(actuation.CodeWatchUnavailable))
}

func TestWatchFollowsDirectoryReplacement(t *testing.T) {
	dir := t.TempDir()
	root := openRoot(t, dir)
	w := newWatcher(t, WatchCaps{})
	e := newEngine(t, Caps{})
	must(t, os.MkdirAll(filepath.Join(dir, "build"), 0o755))
	src, err := w.Source(root, "build/done")
	must(t, err)
	h, err := e.Register(context.Background(), Request{ID: "w-replace", Kind: KindFileExists, Deadline: deadline(testTimeout), Source: src})
	must(t, err)
	pendingFor(t, h, 100*time.Millisecond)
	// The watched directory is removed and recreated; the watch re-arms.
	must(t, os.RemoveAll(filepath.Join(dir, "build")))
	pendingFor(t, h, 100*time.Millisecond)
	must(t, os.MkdirAll(filepath.Join(dir, "build"), 0o755))
	pendingFor(t, h, 100*time.Millisecond)
	must(t, os.WriteFile(filepath.Join(dir, "build", "done"), nil, 0o644))
	if r := result(t, h); r.Status != StatusSatisfied {
		t.Fatalf("result %+v", r)
	}
}

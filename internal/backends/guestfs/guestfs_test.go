package guestfs

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sensorium.dev/workbench/guest/agent"
	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/fixture"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/patch"
	"sensorium.dev/workbench/internal/test/testkit"
)

// world is a real guest agent (in process, on the conformance Unix transport) whose root
// holds the environment root "repo", plus an fsaccess root over the same directory for
// parity checks.
type world struct {
	dir   string // <guest root>/repo on this host
	guest *Root
	host  *fsaccess.Root
	dials int
	// loseApplyAnswers > 0: that many patch.apply requests reach the guest but their
	// answers are lost (the channel fails after the request is written).
	loseApplyAnswers int
	// failDialsAfterLoss: once an answer was lost, every later dial fails.
	failDialsAfterLoss bool
	lost               bool
}

// lossyConn delivers everything written; once a patch.apply request was written, reads
// fail as if the answer was lost.
type lossyConn struct {
	net.Conn
	w    *world
	deaf bool
}

func (c *lossyConn) Write(p []byte) (int, error) {
	if c.w.loseApplyAnswers > 0 && bytes.Contains(p, []byte(`"op":"patch.apply"`)) {
		c.w.loseApplyAnswers--
		c.deaf, c.w.lost = true, true
	}
	return c.Conn.Write(p)
}

func (c *lossyConn) Read(p []byte) (int, error) {
	if c.deaf {
		_ = c.Close()
		return 0, errors.New("answer lost")
	}
	return c.Conn.Read(p)
}

func newWorld(t *testing.T) *world {
	t.Helper()
	base := t.TempDir()
	groot, state := filepath.Join(base, "root"), filepath.Join(base, "state")
	w := &world{dir: filepath.Join(groot, "repo")}
	for _, d := range []string{groot, state, w.dir} {
		must(t, os.Mkdir(d, 0o755))
	}
	nonce := make([]byte, 32)
	rand.Read(nonce)
	b := protocol.Binding{EnvironmentRef: "ns/e", SourceGeneration: 1, PlanDigest: protocol.DigestOf([]byte("plan")),
		ImageDigest: protocol.DigestOf([]byte("image")), GuestCID: 3, BootNonce: hex.EncodeToString(nonce)}
	ga, err := agent.New(agent.Config{Root: groot, StateDir: state, Binding: func() (protocol.Binding, error) { return b, nil }})
	must(t, err)
	sock := filepath.Join(base, "agent.sock")
	l, err := net.Listen("unix", sock)
	must(t, err)
	served := make(chan struct{})
	go func() { defer close(served); _ = ga.Serve(l) }() // ends when the cleanup closes l
	t.Cleanup(func() { _ = l.Close(); <-served; _ = ga.Close() })
	w.guest, err = New(func(ctx context.Context) (*guestclient.Client, error) {
		w.dials++
		if w.failDialsAfterLoss && w.lost {
			return nil, errors.New("the guest is gone")
		}
		conn, err := guestclient.Dial(ctx, guestclient.Endpoint{Path: sock})
		if err != nil {
			return nil, err
		}
		c, err := guestclient.Handshake(ctx, &lossyConn{Conn: conn, w: w}, b)
		if err != nil {
			_ = conn.Close()
		}
		return c, err
	}, "repo")
	must(t, err)
	w.host, err = fsaccess.OpenRoot(w.dir)
	must(t, err)
	t.Cleanup(func() { _ = w.host.Close() })
	return w
}

var must = testkit.Must

// jsonOf is what the data plane serves of v (fsaccess.Entry's inode identity is private).
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return string(b)
}

func (w *world) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(w.dir, rel)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(content), 0o644))
}

func (w *world) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.dir, rel))
	must(t, err)
	return string(b)
}

var wantCode = testkit.WantCode

// TestSnapshotAndReadMatchHost: over the same directory, the guest-backed root answers
// exactly what fsaccess answers (entries, modes, times, digests, truncation).
func TestSnapshotAndReadMatchHost(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.write(t, "a.txt", "alpha\n")
	w.write(t, "sub/b.txt", "beta\n")
	w.write(t, "sub/deep/c.txt", "gamma\n")
	must(t, os.Chmod(filepath.Join(w.dir, "sub", "b.txt"), 0o600))
	must(t, os.Symlink("a.txt", filepath.Join(w.dir, "link")))
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	must(t, os.WriteFile(filepath.Join(w.dir, "big.bin"), big, 0o644))

	for _, tc := range []struct {
		rel string
		lim fsaccess.SnapshotLimits
	}{
		{"", fsaccess.SnapshotLimits{}},
		{"sub", fsaccess.SnapshotLimits{}},
		{"", fsaccess.SnapshotLimits{MaxDepth: 1}},
		{"", fsaccess.SnapshotLimits{MaxFileBytesToHash: 1 << 20}},
		{"", fsaccess.SnapshotLimits{MaxTotalBytesToHash: 8}},
		{"a.txt", fsaccess.SnapshotLimits{}},
		{"link", fsaccess.SnapshotLimits{}},
	} {
		want, err := w.host.Snapshot(tc.rel, tc.lim)
		must(t, err)
		got, err := w.guest.Snapshot(ctx, tc.rel, tc.lim)
		must(t, err)
		if g, h := jsonOf(t, got), jsonOf(t, want); g != h {
			t.Fatalf("snapshot %q %+v:\n guest %s\n host  %s", tc.rel, tc.lim, g, h)
		}
	}
	for _, tc := range []struct {
		rel      string
		off      int64
		maxBytes int
	}{{"a.txt", 0, 0}, {"a.txt", 2, 2}, {"a.txt", 100, 1}, {"big.bin", 5, 1000}, {"big.bin", 0, 1 << 20}, {"link", 0, 0}} {
		want, err := w.host.Read(tc.rel, tc.off, tc.maxBytes)
		must(t, err)
		got, err := w.guest.Read(ctx, tc.rel, tc.off, tc.maxBytes)
		must(t, err)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read %+v:\n guest %+v\n host  %+v", tc, got, want)
		}
	}
}

// TestRefusals: lexical checks before any guest call, and the guest's refusals mapped
// onto fsaccess's codes.
func TestRefusals(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	must(t, os.Symlink("/etc/passwd", filepath.Join(w.dir, "escape")))
	w.write(t, "f", "x")
	before := w.dials
	_, err := w.guest.Read(ctx, "../etc/passwd", 0, 0)
	wantCode(t, err, string(actuation.CodePathTraversal))
	_, err = w.guest.Snapshot(ctx, "/abs", fsaccess.SnapshotLimits{})
	wantCode(t, err, string(actuation.CodePathAbsolute))
	_, err = w.guest.Read(ctx, "f", 0, fsaccess.MaxReadBytesHard+1)
	wantCode(t, err, string(actuation.CodeReadCapAboveMax))
	if w.dials != before {
		t.Fatalf("lexical refusals reached the guest (%d dials)", w.dials-before)
	}
	_, err = w.guest.Read(ctx, "escape", 0, 0)
	wantCode(t, err, string(actuation.CodeSymlinkEscape))
	_, err = w.guest.Read(ctx, "missing", 0, 0)
	wantCode(t, err, string(actuation.CodePathNotFound))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("not-found does not wrap fs.ErrNotExist: %v", err)
	}
	_, err = w.guest.Read(ctx, "f/x", 0, 0)
	wantCode(t, err, string(actuation.CodeNotDirectory))
	_, err = w.guest.Read(ctx, "", 0, 0)
	wantCode(t, err, string(actuation.CodePathEmpty))
	must(t, os.Mkdir(filepath.Join(w.dir, "d"), 0o755))
	_, err = w.guest.Read(ctx, "d", 0, 0)
	wantCode(t, err, string(actuation.CodeNotRegularFile))

	for rel, want := range map[string]bool{"f": true, "d": true, "missing": false, "f/x": false} {
		ok, detail, err := w.guest.Exists(ctx, rel)
		must(t, err)
		if ok != want {
			t.Fatalf("exists %q = %v (%s), want %v", rel, ok, detail, want)
		}
	}

	broken, err := New(func(context.Context) (*guestclient.Client, error) { return nil, errors.New("no VM") }, "repo")
	must(t, err)
	_, err = broken.Read(ctx, "f", 0, 0)
	wantCode(t, err, string(actuation.CodeEnvironmentUnavailable))
}

func request(t *testing.T, format patch.Format, content string, pol patch.Policy) patch.Request {
	t.Helper()
	return patch.Request{Format: format, Content: []byte(content), Digest: fsaccess.DigestBytes([]byte(content)), Policy: pol}
}

func structured(t *testing.T, pol patch.Policy, ops ...patch.StructuredOp) patch.Request {
	t.Helper()
	var b strings.Builder
	b.WriteString("[")
	for i, op := range ops {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"op":%q,"path":%q`, op.Op, op.Path)
		if op.Content != "" {
			fmt.Fprintf(&b, `,"content":%q`, op.Content)
		}
		if op.ExpectDigest != "" {
			fmt.Fprintf(&b, `,"expectDigest":%q`, op.ExpectDigest)
		}
		b.WriteString("}")
	}
	b.WriteString("]")
	return request(t, patch.FormatStructured, b.String(), pol)
}

// TestApplyPatchMatchesHost: the same patches applied through the guest and by
// patch.Apply on a host copy give the same files and the same changedFiles.
func TestApplyPatchMatchesHost(t *testing.T) {
	ctx := context.Background()
	pol := patch.Policy{RequireCleanApply: true, AllowCreate: true}
	reqs := []patch.Request{
		structured(t, pol,
			patch.StructuredOp{Op: patch.OpReplace, Path: "a.txt", Content: "two\n"},
			patch.StructuredOp{Op: patch.OpAppend, Path: "sub/b.txt", Content: "more\n"},
			patch.StructuredOp{Op: patch.OpCreate, Path: "sub/new.txt", Content: "new\n"}),
		request(t, patch.FormatUnified, "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-two\n+three\n", pol),
	}
	w := newWorld(t)
	hostDir := t.TempDir()
	for _, dir := range []string{w.dir, hostDir} {
		must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(dir, "sub", "b.txt"), []byte("b\n"), 0o600))
	}
	host, err := fsaccess.OpenRoot(hostDir)
	must(t, err)
	defer func() { _ = host.Close() }()
	for i, req := range reqs {
		want, err := patch.Apply(host, req)
		must(t, err)
		got, err := w.guest.ApplyPatch(ctx, req)
		must(t, err)
		if !reflect.DeepEqual(got.ChangedFiles, want.ChangedFiles) {
			t.Fatalf("patch %d: guest %+v, host %+v", i, got.ChangedFiles, want.ChangedFiles)
		}
	}
	for _, rel := range []string{"a.txt", "sub/b.txt", "sub/new.txt"} {
		hb, err := os.ReadFile(filepath.Join(hostDir, rel))
		must(t, err)
		if got := w.read(t, rel); got != string(hb) {
			t.Fatalf("%s: guest %q, host %q", rel, got, hb)
		}
	}
	if st, err := os.Stat(filepath.Join(w.dir, "sub", "b.txt")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("replaced file's mode: %v %v", st.Mode(), err)
	}
}

// TestApplyPatchRefusals: dirty bases, policy, and what the guest protocol cannot do.
func TestApplyPatchRefusals(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.write(t, "a.txt", "actual\n")
	pol := patch.Policy{RequireCleanApply: true, AllowCreate: true, AllowDelete: true}
	for _, tc := range []struct {
		name string
		req  patch.Request
		code string
	}{
		{"dirty diff", request(t, patch.FormatUnified, "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-expected\n+changed\n", pol), string(actuation.CodePatchDirty)},
		{"expect digest", structured(t, pol, patch.StructuredOp{Op: patch.OpReplace, Path: "a.txt", Content: "x", ExpectDigest: fsaccess.DigestBytes([]byte("other"))}), string(actuation.CodePatchDirty)},
		{"create existing", structured(t, pol, patch.StructuredOp{Op: patch.OpCreate, Path: "a.txt", Content: "x"}), string(actuation.CodePatchDirty)},
		{"replace missing", structured(t, pol, patch.StructuredOp{Op: patch.OpReplace, Path: "nope.txt", Content: "x"}), string(actuation.CodePatchDirty)},
		{"outside", structured(t, pol, patch.StructuredOp{Op: patch.OpReplace, Path: "../x", Content: "x"}), string(actuation.CodePatchOutsideRoot)},
		{"create forbidden", structured(t, patch.Policy{}, patch.StructuredOp{Op: patch.OpCreate, Path: "n.txt", Content: "x"}), string(actuation.CodePatchCreateForbidden)},
		{"delete", structured(t, pol, patch.StructuredOp{Op: patch.OpDelete, Path: "a.txt"}), "capability-mismatch"},
		{"mode", request(t, patch.FormatUnified, "diff --git a/run.sh b/run.sh\nnew file mode 100755\n--- /dev/null\n+++ b/run.sh\n@@ -0,0 +1 @@\n+echo\n", withExec(pol)), string(actuation.CodePatchModeUnsupported)},
		// Workspace hygiene holds on VM roots too: the host plans every guest patch.
		{"executable bit", request(t, patch.FormatUnified, "diff --git a/run.sh b/run.sh\nnew file mode 100755\n--- /dev/null\n+++ b/run.sh\n@@ -0,0 +1 @@\n+echo\n", pol), string(actuation.CodePatchExecutableForbidden)},
		{"git hook", structured(t, pol, patch.StructuredOp{Op: patch.OpCreate, Path: ".git/hooks/pre-commit", Content: "#!/bin/sh\n"}), string(actuation.CodePatchGitMetadataForbidden)},
		{"git config", structured(t, pol, patch.StructuredOp{Op: patch.OpReplace, Path: ".git/config", Content: "[core]\n"}), string(actuation.CodePatchGitMetadataForbidden)},
	} {
		_, err := w.guest.ApplyPatch(ctx, tc.req)
		if string(actuation.CodeOf(err)) != tc.code {
			t.Fatalf("%s: %v, want code %s", tc.name, err, tc.code)
		}
	}
	if got := w.read(t, "a.txt"); got != "actual\n" {
		t.Fatalf("a refused patch changed a.txt: %q", got)
	}
	if _, err := os.Stat(filepath.Join(w.dir, "newdir")); !os.IsNotExist(err) {
		t.Fatalf("a refused patch created a directory: %v", err)
	}
	// A create under a missing directory makes its parents in the guest (issue 29 item 2:
	// it used to be refused capability-mismatch, which halted skill replay on VMs).
	if _, err := w.guest.ApplyPatch(ctx, structured(t, pol, patch.StructuredOp{Op: patch.OpCreate, Path: "newdir/sub/n.txt", Content: "x"})); err != nil {
		t.Fatalf("create under a missing directory: %v", err)
	}
	if got := w.read(t, "newdir/sub/n.txt"); got != "x" {
		t.Fatalf("newdir/sub/n.txt: %q", got)
	}
}

// TestApplyPatchRollsBack: a file that changes after planning refuses its apply; the files
// already replaced are restored from their staged originals.
func TestApplyPatchRollsBack(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.write(t, "a.txt", "a0\n")
	w.write(t, "b.txt", "b0\n")
	pol := patch.Policy{AllowCreate: true}
	defer func() { beforeApply = nil }()

	// The second replacement's base changes: the first is restored.
	beforeApply = func(rel string) {
		if rel == "b.txt" {
			w.write(t, "b.txt", "someone else\n")
		}
	}
	_, err := w.guest.ApplyPatch(ctx, structured(t, pol,
		patch.StructuredOp{Op: patch.OpReplace, Path: "a.txt", Content: "a1\n"},
		patch.StructuredOp{Op: patch.OpReplace, Path: "b.txt", Content: "b1\n"}))
	wantCode(t, err, string(actuation.CodePatchDirty))
	if a := w.read(t, "a.txt"); a != "a0\n" {
		t.Fatalf("a.txt not restored: %q", a)
	}

	// A create that loses its race: replacements are restored (creates run last).
	w.write(t, "b.txt", "b0\n")
	beforeApply = func(rel string) {
		if rel == "c.txt" {
			w.write(t, "c.txt", "raced\n")
		}
	}
	_, err = w.guest.ApplyPatch(ctx, structured(t, pol,
		patch.StructuredOp{Op: patch.OpCreate, Path: "c.txt", Content: "c1\n"},
		patch.StructuredOp{Op: patch.OpReplace, Path: "a.txt", Content: "a2\n"}))
	wantCode(t, err, string(actuation.CodePatchDirty))
	if a, c := w.read(t, "a.txt"), w.read(t, "c.txt"); a != "a0\n" || c != "raced\n" {
		t.Fatalf("after the failed create: a=%q c=%q", a, c)
	}

	// A created file cannot be removed by the guest protocol: rollback incomplete.
	beforeApply = func(rel string) {
		if rel == "e.txt" {
			w.write(t, "e.txt", "raced\n")
		}
	}
	_, err = w.guest.ApplyPatch(ctx, structured(t, pol,
		patch.StructuredOp{Op: patch.OpCreate, Path: "d.txt", Content: "d\n"},
		patch.StructuredOp{Op: patch.OpCreate, Path: "e.txt", Content: "e\n"}))
	wantCode(t, err, string(actuation.CodePatchRollbackIncomplete))
	if errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a provable outcome reported unknown: %v", err)
	}
}

// TestExportMatchesHost: the re-encoded archive is byte-identical to fixture.ExportRoot's
// over the same files; a symlink refuses as on the host.
func TestExportMatchesHost(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.write(t, "out/report.txt", "report\n")
	w.write(t, "out/deep/data.bin", "\x00\x01\x02")
	must(t, os.Chmod(filepath.Join(w.dir, "out", "deep", "data.bin"), 0o600))
	w.write(t, "secret.txt", "not exported\n")
	for _, rel := range []string{"out", "", "out/report.txt"} {
		var want, got bytes.Buffer
		wres, err := fixture.ExportRoot(w.host, rel, &want, fixture.Limits{})
		must(t, err)
		gres, err := w.guest.Export(ctx, rel, &got, fixture.Limits{})
		must(t, err)
		if !bytes.Equal(got.Bytes(), want.Bytes()) || !reflect.DeepEqual(gres, wres) {
			t.Fatalf("export %q: guest %+v (%d bytes), host %+v (%d bytes)", rel, gres, got.Len(), wres, want.Len())
		}
	}
	var sink bytes.Buffer
	_, err := w.guest.Export(ctx, "out", &sink, fixture.Limits{MaxBytes: 4})
	wantCode(t, err, string(actuation.CodeFixtureTooLarge))
	_, err = w.guest.Export(ctx, "out", &sink, fixture.Limits{MaxFiles: 2})
	wantCode(t, err, string(actuation.CodeFixtureTooLarge))
	must(t, os.Symlink("report.txt", filepath.Join(w.dir, "out", "link")))
	_, err = w.guest.Export(ctx, "out", &sink, fixture.Limits{})
	wantCode(t, err, string(actuation.CodeFixtureSymlink))
	_, err = w.guest.Export(ctx, "missing", &sink, fixture.Limits{})
	wantCode(t, err, string(actuation.CodePathNotFound))
}

// TestApplyPatchLostAnswers: an apply whose answer is lost is settled by re-reading the
// file; when even that fails, the outcome is unknown, never a refusal.
func TestApplyPatchLostAnswers(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.write(t, "a.txt", "a0\n")
	w.write(t, "b.txt", "b0\n")
	pol := patch.Policy{}
	w.loseApplyAnswers = 1
	res, err := w.guest.ApplyPatch(ctx, structured(t, pol,
		patch.StructuredOp{Op: patch.OpReplace, Path: "a.txt", Content: "a1\n"},
		patch.StructuredOp{Op: patch.OpReplace, Path: "b.txt", Content: "b1\n"}))
	must(t, err)
	if !w.lost || len(res.ChangedFiles) != 2 || w.read(t, "a.txt") != "a1\n" || w.read(t, "b.txt") != "b1\n" {
		t.Fatalf("lost answer not settled: lost=%v %+v a=%q b=%q", w.lost, res, w.read(t, "a.txt"), w.read(t, "b.txt"))
	}

	w.loseApplyAnswers, w.lost, w.failDialsAfterLoss = 1, false, true
	_, err = w.guest.ApplyPatch(ctx, structured(t, pol, patch.StructuredOp{Op: patch.OpReplace, Path: "a.txt", Content: "a2\n"}))
	if !errors.Is(err, ErrOutcomeUnknown) || string(actuation.CodeOf(err)) != "" {
		t.Fatalf("unsettled apply: %v (code %q), want ErrOutcomeUnknown", err, string(actuation.CodeOf(err)))
	}
}

// TestUntrustedArchive: the guest's archive is validated before anything is written.
func TestUntrustedArchive(t *testing.T) {
	r, err := New(func(context.Context) (*guestclient.Client, error) { return nil, errors.New("unused") }, "repo")
	must(t, err)
	type ent struct {
		name string
		typ  byte
		body string
	}
	build := func(ents ...ent) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, e := range ents {
			must(t, tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: e.typ, Size: int64(len(e.body)), Mode: 0o7777, Linkname: "x"}))
			_, err := tw.Write([]byte(e.body))
			must(t, err)
		}
		must(t, tw.Close())
		return b.Bytes()
	}
	lim := fixture.Limits{MaxFiles: 10, MaxBytes: 10, MaxDepth: 3}
	for _, tc := range []struct {
		name string
		tar  []byte
		code string
	}{
		{"traversal", build(ent{"../x", tar.TypeReg, "x"}), string(actuation.CodeEnvironmentUnavailable)},
		{"absolute", build(ent{"/etc/x", tar.TypeReg, "x"}), string(actuation.CodeEnvironmentUnavailable)},
		{"duplicate", build(ent{"a", tar.TypeReg, "x"}, ent{"a", tar.TypeReg, "y"}), string(actuation.CodeEnvironmentUnavailable)},
		{"garbage", []byte("not a tar archive at all, padded to a block" + strings.Repeat("?", 600)), string(actuation.CodeEnvironmentUnavailable)},
		{"symlink", build(ent{"l", tar.TypeSymlink, ""}), string(actuation.CodeFixtureSymlink)},
		{"hard link", build(ent{"l", tar.TypeLink, ""}), string(actuation.CodeFixtureSymlink)},
		{"device", build(ent{"d", tar.TypeChar, ""}), string(actuation.CodeFixtureSpecialFile)},
		{"bytes", build(ent{"a", tar.TypeReg, "0123456789x"}), string(actuation.CodeFixtureTooLarge)},
		{"depth", build(ent{"a/b/c/d", tar.TypeReg, ""}), string(actuation.CodeFixtureTooLarge)},
	} {
		_, err := r.checkArchive("", tc.tar, lim)
		if string(actuation.CodeOf(err)) != tc.code {
			t.Fatalf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	got, err := r.checkArchive("", build(ent{"d/", tar.TypeDir, ""}, ent{"d/f", tar.TypeReg, "hi"}), lim)
	must(t, err)
	if len(got) != 2 || got[0].name != "d" || !got[0].dir || got[1].mode != 0o777 || string(got[1].data) != "hi" {
		t.Fatalf("valid archive: %+v", got)
	}
}

func withExec(p patch.Policy) patch.Policy {
	p.AllowExecutable = true
	return p
}

// TestOneFilesInterface: a host root (fsaccess.Host) and a guest root answer the same
// through fsaccess.Files: the shared rules (path validation, read arguments and caps)
// refuse with the same codes before any guest call, and existence reads alike for a file,
// a missing path and a path beneath a file.
func TestOneFilesInterface(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.write(t, "a.txt", "alpha\n")
	impls := map[string]fsaccess.Files{"host": fsaccess.Host(w.host), "guest": w.guest}
	for name, f := range impls {
		for _, tc := range []struct {
			rel, detail string
			ok          bool
		}{{"a.txt", "exists (file)", true}, {"missing.txt", "absent", false}, {"a.txt/under", "absent", false}} {
			ok, detail, err := f.Exists(ctx, tc.rel)
			must(t, err)
			if ok != tc.ok || detail != tc.detail {
				t.Errorf("%s: Exists(%q) = %v %q, want %v %q", name, tc.rel, ok, detail, tc.ok, tc.detail)
			}
		}
		dials := w.dials
		for _, tc := range []struct {
			rel      string
			off      int64
			maxBytes int
			code     string
		}{
			{"../etc/passwd", 0, 0, string(actuation.CodePathTraversal)},
			{"/etc/passwd", 0, 0, string(actuation.CodePathAbsolute)},
			{"a.txt", -1, 0, string(actuation.CodeInvalidArgument)},
			{"a.txt", 0, fsaccess.MaxReadBytesHard + 1, string(actuation.CodeReadCapAboveMax)},
		} {
			_, err := f.Read(ctx, tc.rel, tc.off, tc.maxBytes)
			wantCode(t, err, tc.code)
		}
		_, err := f.Snapshot(ctx, "../up", fsaccess.SnapshotLimits{})
		wantCode(t, err, string(actuation.CodePathTraversal))
		if w.dials != dials {
			t.Errorf("%s: a refused request dialled the guest (%d dials)", name, w.dials-dials)
		}
	}
}

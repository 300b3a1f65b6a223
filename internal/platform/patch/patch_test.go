package patch

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/test/testkit"
)

var must = testkit.Must

var wantCode = testkit.WantCode

// workspace creates a root with hello.txt, gone.txt, sub/c.txt, a symlink to a
// sibling and a directory symlink leaving the root.
func workspace(t *testing.T) (*fsaccess.Root, string) {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "ws")
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	must(t, os.MkdirAll(filepath.Join(base, "outside"), 0o755))
	write(t, dir, "hello.txt", "one\ntwo\nthree\n")
	write(t, dir, "gone.txt", "bye\n")
	write(t, dir, "sub/c.txt", "c\n")
	must(t, os.Chmod(filepath.Join(dir, "hello.txt"), 0o640))
	must(t, os.Symlink("hello.txt", filepath.Join(dir, "link")))
	must(t, os.Symlink(filepath.Join(base, "outside"), filepath.Join(dir, "outdir")))
	r, err := fsaccess.OpenRoot(dir)
	must(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r, dir
}

func write(t *testing.T, dir, rel, content string) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644))
}

func read(t *testing.T, dir, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, rel))
	must(t, err)
	return string(b)
}

func req(format Format, content string, pol Policy) Request {
	return Request{Format: format, Content: []byte(content), Digest: fsaccess.DigestBytes([]byte(content)), Policy: pol}
}

func structured(t *testing.T, ops ...StructuredOp) string {
	b, err := json.Marshal(ops)
	must(t, err)
	return string(b)
}

// noLeftovers asserts no temp or backup files remain anywhere in dir.
func noLeftovers(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && (strings.HasPrefix(d.Name(), fsaccess.TempPrefix) || strings.HasPrefix(d.Name(), fsaccess.BackupPrefix)) {
			t.Errorf("leftover %s", p)
		}
		return nil
	})
}

const modifyHello = `diff --git a/hello.txt b/hello.txt
--- a/hello.txt
+++ b/hello.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
`

func TestUnifiedModifyCreateDelete(t *testing.T) {
	r, dir := workspace(t)
	diff := modifyHello + `diff --git a/new/dir/n.txt b/new/dir/n.txt
new file mode 100755
--- /dev/null
+++ b/new/dir/n.txt
@@ -0,0 +1,2 @@
+hello
+world
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
`
	res, err := Apply(r, req(FormatUnified, diff, Policy{RequireCleanApply: true, AllowCreate: true, AllowDelete: true, AllowExecutable: true}))
	must(t, err)
	if got := read(t, dir, "hello.txt"); got != "one\nTWO\nthree\n" {
		t.Fatalf("hello.txt = %q", got)
	}
	if st, _ := os.Stat(filepath.Join(dir, "hello.txt")); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode not preserved: %v", st.Mode())
	}
	if got := read(t, dir, "new/dir/n.txt"); got != "hello\nworld\n" {
		t.Fatalf("n.txt = %q", got)
	}
	if st, _ := os.Stat(filepath.Join(dir, "new/dir/n.txt")); st.Mode().Perm() != 0o755 {
		t.Fatalf("new file mode %v", st.Mode())
	}
	if _, err := os.Stat(filepath.Join(dir, "gone.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("gone.txt still there")
	}
	want := []ChangedFile{
		{"hello.txt", OpModify, fsaccess.DigestBytes([]byte("one\ntwo\nthree\n")), fsaccess.DigestBytes([]byte("one\nTWO\nthree\n"))},
		{"new/dir/n.txt", OpCreate, "", fsaccess.DigestBytes([]byte("hello\nworld\n"))},
		{"gone.txt", OpDelete, fsaccess.DigestBytes([]byte("bye\n")), ""},
	}
	if fmt.Sprint(res.ChangedFiles) != fmt.Sprint(want) {
		t.Fatalf("changed %+v\nwant %+v", res.ChangedFiles, want)
	}
	noLeftovers(t, dir)
}

func TestTraditionalDiffStripsPrefixes(t *testing.T) {
	r, dir := workspace(t)
	diff := strings.Replace(modifyHello, "diff --git a/hello.txt b/hello.txt\n", "", 1)
	_, err := Apply(r, req(FormatUnified, diff, Policy{}))
	must(t, err)
	if got := read(t, dir, "hello.txt"); got != "one\nTWO\nthree\n" {
		t.Fatalf("hello.txt = %q", got)
	}
}

func TestPlanWritesNothing(t *testing.T) {
	r, dir := workspace(t)
	res, err := Plan(r, req(FormatUnified, modifyHello, Policy{}))
	must(t, err)
	if len(res.ChangedFiles) != 1 || read(t, dir, "hello.txt") != "one\ntwo\nthree\n" {
		t.Fatalf("plan wrote or mis-reported: %+v", res)
	}
}

func TestDigestMismatch(t *testing.T) {
	r, dir := workspace(t)
	rq := req(FormatUnified, modifyHello, Policy{})
	rq.Digest = fsaccess.DigestBytes([]byte("something else"))
	_, err := Apply(r, rq)
	wantCode(t, err, string(actuation.CodeDigestMismatch))
	rq.Digest = ""
	_, err = Apply(r, rq)
	wantCode(t, err, string(actuation.CodeDigestMismatch))
	rq.Digest = "sha256:ABC"
	_, err = Apply(r, rq)
	wantCode(t, err, string(actuation.CodeDigestMismatch))
	if read(t, dir, "hello.txt") != "one\ntwo\nthree\n" {
		t.Fatal("file changed")
	}
}

func TestOutsideRoot(t *testing.T) {
	r, dir := workspace(t)
	for name, diff := range map[string]string{
		"git traversal":  "diff --git a/../../etc/passwd b/../../etc/passwd\n--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n",
		"absolute":       "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-x\n+y\n",
		"trad traversal": "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-x\n+y\n",
		"symlink dir":    "--- a/outdir/x\n+++ b/outdir/x\n@@ -1 +1 @@\n-x\n+y\n",
	} {
		_, err := Apply(r, req(FormatUnified, diff, Policy{AllowCreate: true}))
		if actuation.CodeOf(err) != actuation.CodePatchOutsideRoot {
			t.Errorf("%s: code %q (%v)", name, string(actuation.CodeOf(err)), err)
		}
	}
	for _, p := range []string{"/etc/x", "../x", "sub/../../x", "outdir/planted"} {
		_, err := Apply(r, req(FormatStructured, structured(t, StructuredOp{Op: OpCreate, Path: p, Content: "x"}), Policy{AllowCreate: true}))
		if actuation.CodeOf(err) != actuation.CodePatchOutsideRoot {
			t.Errorf("structured %q: code %q (%v)", p, string(actuation.CodeOf(err)), err)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "outside", "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("planted outside")
	}
	_, err := Apply(r, req(FormatStructured, structured(t, StructuredOp{Op: OpReplace, Path: "a\x00b", Content: "x"}), Policy{}))
	wantCode(t, err, string(actuation.CodePathInvalidCharacter))
}

func TestDirty(t *testing.T) {
	r, dir := workspace(t)
	write(t, dir, "hello.txt", "one\nzwei\nthree\n")
	for _, clean := range []bool{true, false} {
		_, err := Apply(r, req(FormatUnified, modifyHello, Policy{RequireCleanApply: clean}))
		wantCode(t, err, string(actuation.CodePatchDirty))
	}
	// Structured: expectDigest mismatch, create over existing, replace of missing.
	for _, op := range []StructuredOp{
		{Op: OpReplace, Path: "hello.txt", Content: "x", ExpectDigest: fsaccess.DigestBytes([]byte("nope"))},
		{Op: OpCreate, Path: "hello.txt", Content: "x"},
		{Op: OpReplace, Path: "missing.txt", Content: "x"},
		{Op: OpAppend, Path: "missing.txt", Content: "x"},
	} {
		_, err := Apply(r, req(FormatStructured, structured(t, op), Policy{AllowCreate: true}))
		wantCode(t, err, string(actuation.CodePatchDirty))
	}
	if read(t, dir, "hello.txt") != "one\nzwei\nthree\n" {
		t.Fatal("dirty patch changed the file")
	}
}

// git's `index` line pins the base blob: with RequireCleanApply a change outside
// the hunk context is caught; without it the hunk applies.
func TestRequireCleanApplyChecksIndexWithRealGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git binary not found in PATH; needed to generate a real diff with index lines")
	}
	base := t.TempDir()
	var lines []string
	for i := 1; i <= 20; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	orig := strings.Join(lines, "\n") + "\n"
	lines[1] = "line TWO"
	changed := strings.Join(lines, "\n") + "\n"
	must(t, os.MkdirAll(filepath.Join(base, "a"), 0o755))
	must(t, os.MkdirAll(filepath.Join(base, "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(base, "a", "f.txt"), []byte(orig), 0o644))
	must(t, os.WriteFile(filepath.Join(base, "b", "f.txt"), []byte(changed), 0o644))
	cmd := exec.Command("git", "diff", "--no-index", "--full-index", "a/f.txt", "b/f.txt")
	cmd.Dir = base
	out, _ := cmd.Output() // exit 1 means "differences found"
	diff := strings.ReplaceAll(string(out), "a/a/f.txt", "a/f.txt")
	diff = strings.ReplaceAll(diff, "b/b/f.txt", "b/f.txt")
	if !strings.Contains(diff, "index ") {
		t.Fatalf("git produced no index line:\n%s", diff)
	}
	ws := t.TempDir()
	drifted := strings.Replace(orig, "line 19", "line NINETEEN", 1)
	must(t, os.WriteFile(filepath.Join(ws, "f.txt"), []byte(drifted), 0o644))
	r, err := fsaccess.OpenRoot(ws)
	must(t, err)
	defer func() { _ = r.Close() }()
	_, err = Apply(r, req(FormatUnified, diff, Policy{RequireCleanApply: true}))
	wantCode(t, err, string(actuation.CodePatchDirty))
	_, err = Apply(r, req(FormatUnified, diff, Policy{RequireCleanApply: false}))
	must(t, err)
	// And on the exact base the clean apply succeeds.
	must(t, os.WriteFile(filepath.Join(ws, "f.txt"), []byte(orig), 0o644))
	_, err = Apply(r, req(FormatUnified, diff, Policy{RequireCleanApply: true}))
	must(t, err)
	if b, _ := os.ReadFile(filepath.Join(ws, "f.txt")); string(b) != changed {
		t.Fatalf("result %q", b)
	}
}

func TestCreateAndDeleteForbidden(t *testing.T) {
	r, dir := workspace(t)
	newFile := "diff --git a/n.txt b/n.txt\nnew file mode 100644\n--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+x\n"
	_, err := Apply(r, req(FormatUnified, newFile, Policy{}))
	wantCode(t, err, string(actuation.CodePatchCreateForbidden))
	_, err = Apply(r, req(FormatStructured, structured(t, StructuredOp{Op: OpCreate, Path: "n.txt", Content: "x"}), Policy{}))
	wantCode(t, err, string(actuation.CodePatchCreateForbidden))
	del := "diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
	_, err = Apply(r, req(FormatUnified, del, Policy{AllowCreate: true}))
	wantCode(t, err, string(actuation.CodePatchDeleteForbidden))
	_, err = Apply(r, req(FormatStructured, structured(t, StructuredOp{Op: OpDelete, Path: "gone.txt"}), Policy{}))
	wantCode(t, err, string(actuation.CodePatchDeleteForbidden))
	if read(t, dir, "gone.txt") != "bye\n" {
		t.Fatal("deleted anyway")
	}
	// A delete whose content does not match the file is dirty, not a silent delete.
	write(t, dir, "gone.txt", "bye\nmore\n")
	_, err = Apply(r, req(FormatUnified, del, Policy{AllowDelete: true}))
	wantCode(t, err, string(actuation.CodePatchDirty))
	_, err = Apply(r, req(FormatStructured, structured(t, StructuredOp{Op: OpDelete, Path: "gone.txt"}), Policy{AllowDelete: true}))
	must(t, err)
	noLeftovers(t, dir)
}

func TestTooManyFiles(t *testing.T) {
	r, _ := workspace(t)
	var ops []StructuredOp
	for i := 0; i < 3; i++ {
		ops = append(ops, StructuredOp{Op: OpCreate, Path: fmt.Sprintf("f%d", i), Content: "x"})
	}
	_, err := Apply(r, req(FormatStructured, structured(t, ops...), Policy{AllowCreate: true, MaxChangedFiles: 2}))
	wantCode(t, err, string(actuation.CodePatchTooManyFiles))
	ops = nil
	for i := 0; i <= MaxChangedFilesHard; i++ {
		ops = append(ops, StructuredOp{Op: OpCreate, Path: fmt.Sprintf("f%d", i), Content: "x"})
	}
	_, err = Apply(r, req(FormatStructured, structured(t, ops...), Policy{AllowCreate: true, MaxChangedFiles: 100000}))
	wantCode(t, err, string(actuation.CodePatchTooManyFiles))
	diff := strings.Repeat(modifyHello, 1) + strings.ReplaceAll(modifyHello, "hello.txt", "sub/c.txt")
	_, err = Apply(r, req(FormatUnified, diff, Policy{MaxChangedFiles: 1}))
	wantCode(t, err, string(actuation.CodePatchTooManyFiles))
}

func TestUnsupportedAndMalformed(t *testing.T) {
	r, _ := workspace(t)
	cases := map[string]struct {
		format  Format
		content string
		code    string
	}{
		"rename":         {FormatUnified, "diff --git a/hello.txt b/y.txt\nsimilarity index 100%\nrename from hello.txt\nrename to y.txt\n", string(actuation.CodePatchRenameUnsupported)},
		"binary":         {FormatUnified, "diff --git a/bin.dat b/bin.dat\nindex 1234567..89abcde 100644\nBinary files a/bin.dat and b/bin.dat differ\n", string(actuation.CodePatchBinaryUnsupported)},
		"mode":           {FormatUnified, "diff --git a/hello.txt b/hello.txt\nold mode 100644\nnew mode 100755\n", string(actuation.CodePatchModeUnsupported)},
		"symlink create": {FormatUnified, "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n", string(actuation.CodePatchModeUnsupported)},
		"empty":          {FormatUnified, "just words\n", string(actuation.CodePatchMalformed)},
		"bad json":       {FormatStructured, `{"op":"create"}`, string(actuation.CodePatchMalformed)},
		"unknown field":  {FormatStructured, `[{"op":"create","path":"x","mode":"0777"}]`, string(actuation.CodePatchMalformed)},
		"unknown op":     {FormatStructured, `[{"op":"chmod","path":"x"}]`, string(actuation.CodePatchMalformed)},
		"duplicate":      {FormatStructured, `[{"op":"append","path":"hello.txt","content":"a"},{"op":"append","path":"hello.txt","content":"b"}]`, string(actuation.CodePatchMalformed)},
		"reserved name":  {FormatStructured, `[{"op":"create","path":".wbbak-0000000000000000","content":"a"}]`, string(actuation.CodePatchMalformed)},
		"format":         {"ed", "1d\n", string(actuation.CodePatchMalformed)},
		"symlink target": {FormatStructured, `[{"op":"replace","path":"link","content":"a"}]`, string(actuation.CodePatchTargetNotRegular)},
		"dir target":     {FormatStructured, `[{"op":"replace","path":"sub","content":"a"}]`, string(actuation.CodePatchTargetNotRegular)},
	}
	for name, c := range cases {
		_, err := Apply(r, req(c.format, c.content, Policy{AllowCreate: true, AllowDelete: true}))
		if got := string(actuation.CodeOf(err)); got != c.code {
			t.Errorf("%s: code %q (%v), want %q", name, got, err, c.code)
		}
	}
}

func TestStructuredOps(t *testing.T) {
	r, dir := workspace(t)
	helloDigest := fsaccess.DigestBytes([]byte("one\ntwo\nthree\n"))
	res, err := Apply(r, req(FormatStructured, structured(t,
		StructuredOp{Op: OpReplace, Path: "hello.txt", Content: "replaced\n", ExpectDigest: helloDigest},
		StructuredOp{Op: OpAppend, Path: "sub/c.txt", Content: "more\n"},
		StructuredOp{Op: OpCreate, Path: "deep/er/new.txt", Content: "fresh\n"},
	), Policy{AllowCreate: true}))
	must(t, err)
	if read(t, dir, "hello.txt") != "replaced\n" || read(t, dir, "sub/c.txt") != "c\nmore\n" || read(t, dir, "deep/er/new.txt") != "fresh\n" {
		t.Fatal("structured ops not applied")
	}
	if res.ChangedFiles[0].DigestBefore != helloDigest || res.ChangedFiles[1].Op != OpAppend {
		t.Fatalf("%+v", res.ChangedFiles)
	}
	noLeftovers(t, dir)
}

func TestSizeCaps(t *testing.T) {
	r, _ := workspace(t)
	big := strings.Repeat("x", MaxFileBytes+1)
	_, err := Apply(r, req(FormatStructured, structured(t, StructuredOp{Op: OpCreate, Path: "big", Content: big}), Policy{AllowCreate: true}))
	wantCode(t, err, string(actuation.CodePatchTooLarge))
	// Total cap: five 7 MiB files each appended to (35 MiB of new content).
	r2, dir2 := workspace(t)
	chunk := []byte(strings.Repeat("z", 7<<20))
	var ops []StructuredOp
	for i := 0; i < 5; i++ {
		must(t, os.WriteFile(filepath.Join(dir2, fmt.Sprintf("big%d", i)), chunk, 0o644))
		ops = append(ops, StructuredOp{Op: OpAppend, Path: fmt.Sprintf("big%d", i), Content: "!"})
	}
	_, err = Apply(r2, req(FormatStructured, structured(t, ops...), Policy{}))
	wantCode(t, err, string(actuation.CodePatchTooLarge))
	if !strings.Contains(err.Error(), "in total") {
		t.Fatalf("not the total cap: %v", err)
	}
	// Patch document cap is checked before anything else.
	_, err = Apply(r, Request{Format: FormatUnified, Content: make([]byte, MaxPatchBytes+1), Digest: "sha256:x"})
	wantCode(t, err, string(actuation.CodePatchTooLarge))
}

// snapshotTree returns path -> content|mode for every entry in dir.
func snapshotTree(t *testing.T, dir string) map[string]string {
	out := map[string]string{}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		must(t, err)
		rel, _ := filepath.Rel(dir, p)
		info, _ := d.Info()
		v := info.Mode().String()
		if d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			v += ":" + string(b)
		}
		out[rel] = v
		return nil
	})
	return out
}

func rollbackPatch(t *testing.T) Request {
	return req(FormatStructured, structured(t,
		StructuredOp{Op: OpReplace, Path: "hello.txt", Content: "NEW HELLO\n"},
		StructuredOp{Op: OpCreate, Path: "fresh/dir/n.txt", Content: "n\n"},
		StructuredOp{Op: OpDelete, Path: "gone.txt"},
		StructuredOp{Op: OpAppend, Path: "sub/c.txt", Content: "tail\n"},
	), Policy{AllowCreate: true, AllowDelete: true})
}

// A concurrent writer changes the last target between planning and writing:
// the three changes already written are rolled back.
func TestRollbackOnConcurrentChange(t *testing.T) {
	r, dir := workspace(t)
	before := snapshotTree(t, dir)
	beforeIno := inode(t, filepath.Join(dir, "hello.txt"))
	beforeWrite = func(i int, p string) error {
		if i == 3 {
			write(t, dir, "sub/c.txt", "someone else\n")
		}
		return nil
	}
	defer func() { beforeWrite = nil }()
	_, err := Apply(r, rollbackPatch(t))
	wantCode(t, err, string(actuation.CodePatchDirty))
	if !strings.Contains(err.Error(), "3 written change(s) rolled back") {
		t.Fatalf("message: %v", err)
	}
	after := snapshotTree(t, dir)
	after["sub/c.txt"] = before["sub/c.txt"] // the concurrent writer's change is theirs
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("not rolled back:\nbefore %v\nafter  %v", before, after)
	}
	if inode(t, filepath.Join(dir, "hello.txt")) != beforeIno {
		t.Fatal("rollback did not restore the original inode")
	}
}

// A directory appears where a file is expected midway: rolled back.
func TestRollbackOnDirectoryWhereFileExpected(t *testing.T) {
	r, dir := workspace(t)
	before := snapshotTree(t, dir)
	beforeWrite = func(i int, p string) error {
		if i == 3 {
			must(t, os.Remove(filepath.Join(dir, "sub/c.txt")))
			must(t, os.Mkdir(filepath.Join(dir, "sub/c.txt"), 0o755))
		}
		return nil
	}
	defer func() { beforeWrite = nil }()
	_, err := Apply(r, rollbackPatch(t))
	wantCode(t, err, string(actuation.CodePatchTargetNotRegular))
	must(t, os.Remove(filepath.Join(dir, "sub/c.txt")))
	write(t, dir, "sub/c.txt", "c\n")
	if after := snapshotTree(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("not rolled back:\nbefore %v\nafter  %v", before, after)
	}
}

const fsImmutableFL = 0x00000010 // FS_IMMUTABLE_FL

// setImmutable sets or clears only FS_IMMUTABLE_FL on path: a read-modify-write of the
// flag word (FS_IOC_GETFLAGS, then FS_IOC_SETFLAGS), so the filesystem's own flags
// (ext4's EXTENTS_FL on every directory, for one) are written back unchanged — writing a
// whole word of 0 asks to clear them and is refused with EPERM. Clearing a bit that is
// already clear writes nothing.
func setImmutable(path string, on bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	want := flags &^ fsImmutableFL
	if on {
		want = flags | fsImmutableFL
	}
	if want == flags {
		return nil
	}
	v := int(want)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.FS_IOC_SETFLAGS, uintptr(unsafe.Pointer(&v)))
	if errno != 0 {
		return errno
	}
	return nil
}

// A real write failure from the kernel: the last target's directory is made
// immutable (chattr +i), so its backup/temp file cannot be created. Everything
// already written is rolled back.
func TestRollbackOnImmutableDirectory(t *testing.T) {
	r, dir := workspace(t)
	before := snapshotTree(t, dir)
	locked := filepath.Join(dir, "sub")
	if err := setImmutable(locked, true); err != nil {
		t.Skipf("cannot set FS_IMMUTABLE_FL on %s (needs CAP_LINUX_IMMUTABLE and ext4/xfs/btrfs-like fs): %v", locked, err)
	}
	t.Cleanup(func() {
		if err := setImmutable(locked, false); err != nil {
			t.Errorf("clearing FS_IMMUTABLE_FL on %s: %v", locked, err)
		}
	})
	_, err := Apply(r, rollbackPatch(t))
	wantCode(t, err, string(actuation.CodePatchWriteFailed))
	if !errors.Is(err, unix.EPERM) {
		t.Fatalf("cause is not EPERM: %v", err)
	}
	must(t, setImmutable(locked, false))
	if after := snapshotTree(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("not rolled back:\nbefore %v\nafter  %v", before, after)
	}
	noLeftovers(t, dir)
}

func inode(t *testing.T, p string) uint64 {
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	return st.Ino
}

// memSource is an in-memory Source (what a non-fsaccess applier provides).
type memSource map[string]string

func (m memSource) Current(rel string) (bool, []byte, fsaccess.Entry, error) {
	c, ok := m[rel]
	if !ok {
		return false, nil, fsaccess.Entry{Path: rel}, nil
	}
	return true, []byte(c), fsaccess.Entry{Path: rel, Type: fsaccess.TypeFile, Size: int64(len(c)), Mode: 0o600, Digest: fsaccess.DigestBytes([]byte(c))}, nil
}

// TestPlanChangesFromSource: planning runs against any Source, with the same checks, and
// returns what an applier needs (old and new content, digests, modes); Plan through
// RootSource answers the same summary.
func TestPlanChangesFromSource(t *testing.T) {
	ops := `[{"op":"replace","path":"hello.txt","content":"new\n"},{"op":"append","path":"sub/c.txt","content":"d\n"},{"op":"create","path":"n.txt","content":"n\n"}]`
	req := Request{Format: FormatStructured, Content: []byte(ops), Digest: fsaccess.DigestBytes([]byte(ops)), Policy: Policy{AllowCreate: true}}
	src := memSource{"hello.txt": "one\ntwo\nthree\n", "sub/c.txt": "c\n"}
	changes, err := PlanChanges(src, req)
	must(t, err)
	if len(changes) != 3 || string(changes[1].NewContent) != "c\nd\n" || string(changes[0].OldContent) != src["hello.txt"] ||
		!changes[0].Existed || changes[2].Existed || changes[2].NewMode != 0o644 || changes[0].NewMode != 0o600 ||
		changes[2].NewDigest != fsaccess.DigestBytes([]byte("n\n")) || changes[2].OldDigest != "" {
		t.Fatalf("changes = %+v", changes)
	}
	root, _ := workspace(t)
	res, err := Plan(root, req)
	must(t, err)
	if fmt.Sprint(res.ChangedFiles) != fmt.Sprint(Summarize(changes)) {
		t.Fatalf("Plan %+v, PlanChanges %+v", res.ChangedFiles, Summarize(changes))
	}
	dirty := `[{"op":"create","path":"hello.txt","content":"x"}]`
	_, err = PlanChanges(src, Request{Format: FormatStructured, Content: []byte(dirty), Digest: fsaccess.DigestBytes([]byte(dirty)), Policy: Policy{AllowCreate: true}})
	wantCode(t, err, string(actuation.CodePatchDirty))
}

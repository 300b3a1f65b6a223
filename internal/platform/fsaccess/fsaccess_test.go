package fsaccess

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/testkit"
)

// tree builds: root/{a.txt, sub/b.txt, sub/in-link -> ../a.txt, passwd -> /etc/passwd,
// up -> ../outside/secret, outdir -> <outside>, abs-in -> <root>/a.txt} and a sibling
// directory outside/secret next to root.
func tree(t *testing.T) (root *Root, dir, outside string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "sub", "b.txt"), []byte("beta\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret\n"), 0o644))
	must(t, os.Symlink("../a.txt", filepath.Join(dir, "sub", "in-link")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")))
	must(t, os.Symlink("../outside/secret", filepath.Join(dir, "up")))
	must(t, os.Symlink(outside, filepath.Join(dir, "outdir")))
	must(t, os.Symlink(filepath.Join(dir, "a.txt"), filepath.Join(dir, "abs-in")))
	r, err := OpenRoot(dir)
	must(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r, dir, outside
}

var (
	must     = testkit.Must
	wantCode = testkit.WantCode
)

func TestCheckRelVectors(t *testing.T) {
	cases := []struct {
		p           string
		requireFile bool
		code        string
	}{
		{"", true, string(actuation.CodePathEmpty)},
		{"", false, ""},
		{"a/b.txt", true, ""},
		{"/etc/passwd", true, string(actuation.CodePathAbsolute)},
		{"a/../../x", true, string(actuation.CodePathTraversal)},
		{"..", true, string(actuation.CodePathTraversal)},
		{"a/./b", true, string(actuation.CodePathInvalidComponent)},
		{".", false, string(actuation.CodePathInvalidComponent)},
		{"a//b", true, string(actuation.CodePathInvalidComponent)},
		{"a/", true, string(actuation.CodePathInvalidComponent)},
		{"a\x00b", true, string(actuation.CodePathInvalidCharacter)},
		{`a\b`, true, string(actuation.CodePathInvalidCharacter)},
		{"a\nb", true, string(actuation.CodePathInvalidCharacter)},
		{"\xff", true, string(actuation.CodePathInvalidCharacter)},
		{strings.Repeat("a", 256), true, string(actuation.CodePathTooLong)},
		{strings.Repeat("a/", 2048) + "a", true, string(actuation.CodePathTooLong)},
	}
	for _, c := range cases {
		if got := string(actuation.CodeOf(CheckRel(c.p, c.requireFile))); got != c.code {
			t.Errorf("CheckRel(%q, %v) = %q, want %q", c.p, c.requireFile, got, c.code)
		}
	}
}

func TestReadRefusesEscapes(t *testing.T) {
	r, _, _ := tree(t)
	for _, c := range []struct{ rel, code string }{
		{"passwd", string(actuation.CodeSymlinkEscape)},        // absolute symlink to /etc/passwd
		{"abs-in", string(actuation.CodeSymlinkEscape)},        // absolute symlink, even pointing inside: RESOLVE_BENEATH refuses
		{"up", string(actuation.CodeSymlinkEscape)},            // relative symlink climbing out
		{"outdir/secret", string(actuation.CodeSymlinkEscape)}, // directory symlink outside, mid-path
		{"a/../../x", string(actuation.CodePathTraversal)},     // lexical
		{"/etc/passwd", string(actuation.CodePathAbsolute)},    // lexical
		{"", string(actuation.CodePathEmpty)},                  // root self-access where a file is required
		{"sub", string(actuation.CodeNotRegularFile)},
		{"missing", string(actuation.CodePathNotFound)},
	} {
		_, err := r.Read(c.rel, 0, 0)
		if got := string(actuation.CodeOf(err)); got != c.code {
			t.Errorf("Read(%q): code %q (err %v), want %q", c.rel, got, err, c.code)
		}
	}
	_, err := r.Read("missing", 0, 0)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file error %v is not fs.ErrNotExist", err)
	}
}

// The kernel, not only the lexical check, refuses `..` escapes.
func TestKernelRefusesTraversalWithoutLexicalCheck(t *testing.T) {
	r, _, _ := tree(t)
	for _, p := range []string{"sub/../../outside/secret", "..", "/etc/passwd", "outdir/secret"} {
		fd, err := r.open(p, unix.O_RDONLY, 0)
		if err == nil {
			unix.Close(fd)
			t.Fatalf("kernel opened %q", p)
		}
		wantCode(t, err, string(actuation.CodeSymlinkEscape))
	}
	// ".." that stays beneath is allowed by the kernel (the lexical layer refuses it).
	fd, err := r.open("sub/../a.txt", unix.O_RDONLY, 0)
	must(t, err)
	unix.Close(fd)
}

func TestReadSiblingSymlinkBeneath(t *testing.T) {
	r, _, _ := tree(t)
	res, err := r.Read("sub/in-link", 0, 0)
	must(t, err)
	if string(res.Data) != "alpha\n" || !res.EOF || res.Size != 6 || res.Digest != DigestBytes([]byte("alpha\n")) {
		t.Fatalf("unexpected %+v", res)
	}
	// Writers never follow a final symlink, even one that stays beneath.
	_, _, err = r.ReadFile("sub/in-link", 1<<20)
	wantCode(t, err, string(actuation.CodeSymlinkEscape))
	_, err = r.OpenForWrite("sub/in-link")
	wantCode(t, err, string(actuation.CodeSymlinkEscape))
}

func TestReadWindowAndCaps(t *testing.T) {
	r, dir, _ := tree(t)
	data := bytes.Repeat([]byte("0123456789"), 1000)
	must(t, os.WriteFile(filepath.Join(dir, "big"), data, 0o644))
	res, err := r.Read("big", 9990, 100)
	must(t, err)
	if string(res.Data) != "0123456789" || !res.EOF || res.Digest != DigestBytes(data) {
		t.Fatalf("tail window: %+v", res)
	}
	res, err = r.Read("big", 10, 5)
	must(t, err)
	if string(res.Data) != "01234" || res.EOF || res.Size != int64(len(data)) {
		t.Fatalf("mid window: %+v", res)
	}
	res, err = r.Read("big", 1<<40, 5)
	must(t, err)
	if len(res.Data) != 0 || !res.EOF {
		t.Fatalf("past end: %+v", res)
	}
	_, err = r.Read("big", 0, MaxReadBytesHard+1)
	wantCode(t, err, string(actuation.CodeReadCapAboveMax))
	_, err = r.Read("big", -1, 1)
	wantCode(t, err, string(actuation.CodeInvalidArgument))
	// A FIFO is refused without blocking.
	must(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	_, err = r.Read("fifo", 0, 0)
	wantCode(t, err, string(actuation.CodeNotRegularFile))
	_, _, err = r.ReadFile("big", 10)
	wantCode(t, err, string(actuation.CodeFileTooLarge))
}

func TestSnapshotListsSymlinksWithoutFollowing(t *testing.T) {
	r, _, _ := tree(t)
	snap, err := r.Snapshot("", SnapshotLimits{})
	must(t, err)
	got := map[string]Entry{}
	var order []string
	for _, e := range snap.Entries {
		got[e.Path] = e
		order = append(order, e.Path)
	}
	want := []string{"a.txt", "abs-in", "outdir", "passwd", "sub", "sub/b.txt", "sub/in-link", "up"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if snap.Truncated {
		t.Fatalf("unexpected truncation %v", snap.TruncatedBy)
	}
	if e := got["passwd"]; e.Type != TypeSymlink || e.LinkTarget != "/etc/passwd" || e.Digest != "" {
		t.Fatalf("passwd: %+v", e)
	}
	if e := got["outdir"]; e.Type != TypeSymlink {
		t.Fatalf("outdir: %+v", e)
	}
	if _, ok := got["outdir/secret"]; ok {
		t.Fatal("snapshot followed a directory symlink")
	}
	if e := got["a.txt"]; e.Type != TypeFile || e.Size != 6 || e.Digest != DigestBytes([]byte("alpha\n")) || e.Mode.Perm() != 0o644 {
		t.Fatalf("a.txt: %+v", e)
	}
	if e := got["sub"]; e.Type != TypeDir || !e.Mode.IsDir() {
		t.Fatalf("sub: %+v", e)
	}
	// A sub-snapshot starting at a symlink describes the link only.
	s2, err := r.Snapshot("outdir", SnapshotLimits{})
	must(t, err)
	if len(s2.Entries) != 1 || s2.Entries[0].Type != TypeSymlink {
		t.Fatalf("snapshot of outdir: %+v", s2.Entries)
	}
	_, err = r.Snapshot("outdir/x", SnapshotLimits{})
	wantCode(t, err, string(actuation.CodeSymlinkEscape))
}

func TestSnapshotCaps(t *testing.T) {
	base := t.TempDir()
	for i := 0; i < 20; i++ {
		must(t, os.WriteFile(filepath.Join(base, fmt.Sprintf("f%02d", i)), []byte("x"), 0o644))
	}
	deep := base
	for i := 0; i < 6; i++ {
		deep = filepath.Join(deep, "d")
		must(t, os.Mkdir(deep, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(base, "huge"), make([]byte, 4096), 0o644))
	r, err := OpenRoot(base)
	must(t, err)
	defer func() { _ = r.Close() }()

	snap, err := r.Snapshot("", SnapshotLimits{MaxEntries: 5})
	must(t, err)
	if !snap.Truncated || len(snap.Entries) != 5 || fmt.Sprint(snap.TruncatedBy) != "[max-entries]" {
		t.Fatalf("entries cap: truncated=%v by=%v n=%d", snap.Truncated, snap.TruncatedBy, len(snap.Entries))
	}
	snap, err = r.Snapshot("", SnapshotLimits{MaxDepth: 3, MaxFileBytesToHash: 1024})
	must(t, err)
	if !snap.Truncated || fmt.Sprint(snap.TruncatedBy) != "[max-depth]" {
		t.Fatalf("depth cap: %v %v", snap.Truncated, snap.TruncatedBy)
	}
	for _, e := range snap.Entries {
		if strings.Count(e.Path, "/") >= 3 {
			t.Fatalf("entry %s deeper than MaxDepth", e.Path)
		}
		if e.Path == "huge" && (e.Digest != "" || e.DigestOmitted != "over-file-cap") {
			t.Fatalf("huge: %+v", e)
		}
	}
	snap, err = r.Snapshot("", SnapshotLimits{MaxTotalBytesToHash: 10})
	must(t, err)
	omitted := 0
	for _, e := range snap.Entries {
		if e.DigestOmitted == "over-total-cap" {
			omitted++
		}
	}
	if omitted == 0 || snap.Truncated {
		t.Fatalf("total hash budget not applied: omitted=%d truncated=%v", omitted, snap.Truncated)
	}
}

func TestWriteHelpersStayBeneath(t *testing.T) {
	r, dir, outside := tree(t)
	must(t, r.WriteFileAtomic("sub/new.txt", []byte("new"), 0o640))
	b, err := os.ReadFile(filepath.Join(dir, "sub", "new.txt"))
	must(t, err)
	st, _ := os.Stat(filepath.Join(dir, "sub", "new.txt"))
	if string(b) != "new" || st.Mode().Perm() != 0o640 {
		t.Fatalf("atomic write: %q %v", b, st.Mode())
	}
	err = r.CreateFileAtomic("sub/new.txt", []byte("again"), 0o644)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CreateFileAtomic over existing: %v", err)
	}
	// Writes through a directory symlink that leaves the root are refused.
	err = r.WriteFileAtomic("outdir/planted", []byte("x"), 0o644)
	wantCode(t, err, string(actuation.CodeSymlinkEscape))
	_, err = r.CreateExclusive("outdir/planted", 0o644)
	wantCode(t, err, string(actuation.CodeSymlinkEscape))
	if _, err := os.Stat(filepath.Join(outside, "planted")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("file planted outside the root")
	}
	// OpenForWrite on the /etc/passwd symlink is refused (never followed).
	_, err = r.OpenForWrite("passwd")
	wantCode(t, err, string(actuation.CodeSymlinkEscape))
	// Rename and Link beneath.
	must(t, r.Rename("sub/new.txt", "moved.txt"))
	must(t, r.Link("moved.txt", "linked.txt"))
	if b, _ := os.ReadFile(filepath.Join(dir, "linked.txt")); string(b) != "new" {
		t.Fatal("link content")
	}
	err = r.Rename("moved.txt", "outdir/stolen")
	wantCode(t, err, string(actuation.CodeSymlinkEscape))
	created, err := r.MkdirAll("x/y/z", 0o755)
	must(t, err)
	if fmt.Sprint(created) != "[x x/y x/y/z]" {
		t.Fatalf("created %v", created)
	}
	_, err = r.MkdirAll("a.txt/q", 0o755)
	wantCode(t, err, string(actuation.CodeNotDirectory))
	// Remove on a symlink removes the link, not the target; RemoveAll never follows.
	must(t, r.Remove("passwd"))
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatal(err)
	}
	must(t, os.Symlink(outside, filepath.Join(dir, "x", "y", "out")))
	must(t, r.RemoveAll("x"))
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Fatalf("RemoveAll followed a symlink: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("x not removed")
	}
	must(t, r.RemoveAll("x")) // idempotent
	err = r.RemoveAll("")
	wantCode(t, err, string(actuation.CodePathEmpty))
}

func TestOpenat2UnavailableFailsClosed(t *testing.T) {
	r, dir, _ := tree(t)
	saved := openat2
	openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
	defer func() { openat2 = saved }()
	_, err := OpenRoot(dir)
	wantCode(t, err, string(actuation.CodeOpenat2Unavailable))
	_, err = r.Read("a.txt", 0, 0)
	wantCode(t, err, string(actuation.CodeOpenat2Unavailable))
	_, err = r.Snapshot("", SnapshotLimits{})
	wantCode(t, err, string(actuation.CodeOpenat2Unavailable))
	err = r.WriteFileAtomic("z", nil, 0o644)
	wantCode(t, err, string(actuation.CodeOpenat2Unavailable))
	_, err = r.Lstat("a.txt")
	wantCode(t, err, string(actuation.CodeOpenat2Unavailable))
}

func TestOpenRootRequiresDirectory(t *testing.T) {
	_, dir, _ := tree(t)
	_, err := OpenRoot(filepath.Join(dir, "a.txt"))
	wantCode(t, err, string(actuation.CodeNotDirectory))
}

func TestParseDigest(t *testing.T) {
	good := DigestBytes([]byte("x"))
	if _, err := ParseDigest(good); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "sha256:", "sha512:" + good[7:], strings.ToUpper(good), good + "0"} {
		if actuation.CodeOf(func() error { _, err := ParseDigest(bad); return err }()) != actuation.CodeDigestInvalid {
			t.Errorf("ParseDigest(%q) accepted", bad)
		}
	}
}

func benchTree(b *testing.B) string {
	dir := b.TempDir()
	for d := 0; d < 10; d++ {
		sub := filepath.Join(dir, fmt.Sprintf("d%d", d))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := 0; f < 20; f++ {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", f)), bytes.Repeat([]byte{byte(f)}, 4096), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	return dir
}

// openBenchRoot opens dir as a Root for one benchmark and closes it when the benchmark ends.
func openBenchRoot(b *testing.B, dir string) *Root {
	b.Helper()
	r, err := OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	return r
}

// BenchmarkSnapshot: 10 dirs x 20 files x 4 KiB, hashed.
func BenchmarkSnapshot(b *testing.B) {
	r := openBenchRoot(b, benchTree(b))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Snapshot("", SnapshotLimits{}); err != nil {
			b.Fatal(err)
		}
	}
}

const benchFileBytes = 64 << 10

func benchFile(b *testing.B) string {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte("x"), benchFileBytes), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// BenchmarkReadBeneath: Read (openat2 + fstat + pread + full-file sha256) of 64 KiB.
func BenchmarkReadBeneath(b *testing.B) {
	r := openBenchRoot(b, benchFile(b))
	b.SetBytes(benchFileBytes)
	for i := 0; i < b.N; i++ {
		if _, err := r.Read("f", 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadFileBeneath: ReadFile (openat2 + read, sha256 of content) of 64 KiB.
func BenchmarkReadFileBeneath(b *testing.B) {
	r := openBenchRoot(b, benchFile(b))
	b.SetBytes(benchFileBytes)
	for i := 0; i < b.N; i++ {
		if _, _, err := r.ReadFile("f", 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOsReadFile is the floor: os.ReadFile of the same 64 KiB, no checks, no hash.
func BenchmarkOsReadFile(b *testing.B) {
	p := filepath.Join(benchFile(b), "f")
	b.SetBytes(benchFileBytes)
	for i := 0; i < b.N; i++ {
		if _, err := os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenBeneath isolates the resolution cost: openat2(RESOLVE_BENEATH)+close.
func BenchmarkOpenBeneath(b *testing.B) {
	r := openBenchRoot(b, benchFile(b))
	for i := 0; i < b.N; i++ {
		fd, err := r.open("f", unix.O_RDONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
	}
}

// BenchmarkOsOpen is its floor: open(2) of the absolute path + close.
func BenchmarkOsOpen(b *testing.B) {
	p := filepath.Join(benchFile(b), "f")
	for i := 0; i < b.N; i++ {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
}

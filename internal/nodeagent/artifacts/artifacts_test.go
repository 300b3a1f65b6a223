package artifacts

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/test/testkit"
)

var must = testkit.Must

var wantCode = testkit.WantCode

func store(t *testing.T) (*Store, string) {
	dir := filepath.Join(t.TempDir(), "artifacts")
	s, err := Open(dir)
	must(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, dir
}

func count(t *testing.T, dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func TestPutOpenDedup(t *testing.T) {
	s, dir := store(t)
	content := []byte("terminal capture\n")
	d, n, err := s.Put(bytes.NewReader(content), 1024)
	must(t, err)
	if d != fsaccess.DigestBytes(content) || n != int64(len(content)) {
		t.Fatalf("put: %s %d", d, n)
	}
	hexd := d[len("sha256:"):]
	if _, err := os.Stat(filepath.Join(dir, "sha256", hexd[:2], hexd)); err != nil {
		t.Fatalf("layout: %v", err)
	}
	d2, _, err := s.Put(bytes.NewReader(content), 1024)
	must(t, err)
	if d2 != d || count(t, dir) != 1 {
		t.Fatalf("dedup: %s, %d files", d2, count(t, dir))
	}
	b, err := s.Open(d)
	must(t, err)
	got, _ := io.ReadAll(b)
	_ = b.Close()
	if !bytes.Equal(got, content) || b.Size != int64(len(content)) {
		t.Fatalf("open: %q", got)
	}
	info, err := s.Stat(d)
	must(t, err)
	if info.Size != int64(len(content)) {
		t.Fatalf("stat %+v", info)
	}
	must(t, s.Delete(d))
	_, err = s.Open(d)
	wantCode(t, err, string(actuation.CodeArtifactNotFound))
	_, err = s.Stat(d)
	wantCode(t, err, string(actuation.CodeArtifactNotFound))
	must(t, s.Delete(d)) // idempotent
}

func TestCapsAndDeclaredMismatch(t *testing.T) {
	s, dir := store(t)
	_, _, err := s.Put(strings.NewReader(strings.Repeat("x", 101)), 100)
	wantCode(t, err, string(actuation.CodeArtifactTooLarge))
	_, _, err = s.Put(strings.NewReader("x"), MaxBytesHard+1)
	wantCode(t, err, string(actuation.CodeArtifactTooLarge))
	_, _, err = s.Put(strings.NewReader("x"), 0)
	wantCode(t, err, string(actuation.CodeInvalidArgument))
	_, _, err = s.PutExpect(strings.NewReader("abc"), 100, fsaccess.DigestBytes([]byte("abd")), -1)
	wantCode(t, err, string(actuation.CodeDigestMismatch))
	_, _, err = s.PutExpect(strings.NewReader("abc"), 100, "", 4)
	wantCode(t, err, string(actuation.CodeSizeMismatch))
	_, _, err = s.PutExpect(strings.NewReader("abc"), 100, "sha256:nothex", -1)
	wantCode(t, err, string(actuation.CodeDigestInvalid))
	if n := count(t, dir); n != 0 {
		t.Fatalf("%d files left after refusals", n)
	}
	d, _, err := s.PutExpect(strings.NewReader("abc"), 100, fsaccess.DigestBytes([]byte("abc")), 3)
	must(t, err)
	for _, bad := range []string{"sha256:../../etc/passwd", "md5:abc", "", strings.ToUpper(d)} {
		_, err := s.Open(bad)
		wantCode(t, err, string(actuation.CodeDigestInvalid))
	}
}

func TestCorruptBlobIsReportedNotServed(t *testing.T) {
	s, dir := store(t)
	d, _, err := s.Put(strings.NewReader("original bytes"), 100)
	must(t, err)
	hexd := d[len("sha256:"):]
	p := filepath.Join(dir, "sha256", hexd[:2], hexd)
	must(t, os.Chmod(p, 0o644))
	must(t, os.WriteFile(p, []byte("tampered bytes"), 0o644))
	b, err := s.Open(d)
	if b != nil {
		t.Fatal("corrupt blob served")
	}
	wantCode(t, err, string(actuation.CodeArtifactCorrupt))
	wantCode(t, s.Verify(d), string(actuation.CodeArtifactCorrupt))
	// Putting the true content again repairs the blob.
	_, _, err = s.Put(strings.NewReader("original bytes"), 100)
	must(t, err)
	must(t, s.Verify(d))
}

func TestGC(t *testing.T) {
	s, dir := store(t)
	put := func(c string) string {
		d, _, err := s.Put(strings.NewReader(c), 100)
		must(t, err)
		return d
	}
	age := func(d string, when time.Time) {
		hexd := d[len("sha256:"):]
		must(t, os.Chtimes(filepath.Join(dir, "sha256", hexd[:2], hexd), when, when))
	}
	now := time.Now().Add(24 * time.Hour)
	old := now.Add(-time.Hour)
	retained, expired, unref, young := put("retained"), put("expired"), put("unreferenced"), put("young")
	age(retained, old)
	age(expired, old)
	age(unref, old)
	age(young, now.Add(-time.Minute))
	must(t, os.WriteFile(filepath.Join(dir, "tmp", "put-dead"), []byte("partial"), 0o644))
	must(t, os.Chtimes(filepath.Join(dir, "tmp", "put-dead"), old, old))
	must(t, os.WriteFile(filepath.Join(dir, "sha256", "stray"), []byte("?"), 0o644))
	must(t, os.Chtimes(filepath.Join(dir, "sha256", "stray"), old, old))
	res, err := s.GC(map[string]time.Time{retained: now.Add(time.Hour), expired: now.Add(-time.Second)}, now)
	must(t, err)
	deleted := map[string]bool{}
	for _, d := range res.Deleted {
		deleted[d] = true
	}
	if len(deleted) != 2 || !deleted[expired] || !deleted[unref] || res.Kept != 2 || res.TempRemoved != 1 || len(res.Strays) != 1 || res.Truncated {
		t.Fatalf("gc %+v", res)
	}
	must(t, s.Verify(retained))
	must(t, s.Verify(young))
	_, err = s.Open(expired)
	wantCode(t, err, string(actuation.CodeArtifactNotFound))
}

package sources

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

type tarEnt struct {
	name, link string
	typ        byte
	mode       int64
	body       string
	size       int64 // when > 0 and body == "": that many zero bytes
}

func tarBytes(t *testing.T, ents []tarEnt) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Format: tar.FormatPAX}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
			if e.body == "" {
				h.Size = e.size
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if e.body != "" {
				_, _ = tw.Write([]byte(e.body))
			} else if e.size > 0 {
				_, _ = tw.Write(make([]byte, e.size))
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sandbox is a parent directory holding the extraction target "copy" and a sentinel
// directory "outside"; after an extraction, nothing but copy/ may have changed.
type sandbox struct {
	parent, copy, outside string
}

func newSandbox(t *testing.T) sandbox {
	t.Helper()
	p := t.TempDir()
	s := sandbox{parent: p, copy: filepath.Join(p, "copy"), outside: filepath.Join(p, "outside")}
	for _, d := range []string{s.copy, s.outside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.outside, "keep"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// outsideUntouched fails when anything but copy/ and outside/keep exists in the parent,
// or outside/keep changed.
func (s sandbox) outsideUntouched(t *testing.T) {
	t.Helper()
	var got []string
	err := filepath.WalkDir(s.parent, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.parent, p)
		got = append(got, rel)
		if rel == "copy" {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	if strings.Join(got, ",") != ".,copy,outside,outside/keep" {
		t.Fatalf("entries outside the copy: %v", got)
	}
	if b, err := os.ReadFile(filepath.Join(s.outside, "keep")); err != nil || string(b) != "keep" {
		t.Fatalf("outside/keep changed: %q %v", b, err)
	}
	for _, p := range []string{"/tmp/wb-archive-escape", "/wb-archive-escape"} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s was written", p)
		}
	}
}

func (s sandbox) extract(t *testing.T, data []byte, format string, lim Limits) (Result, error) {
	t.Helper()
	root, err := fsaccess.OpenRoot(s.copy)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = root.Close() }()
	return Extract(bytes.NewReader(data), int64(len(data)), format, root, lim)
}

func gz(t *testing.T, b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	_, _ = zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestExtractTarGood(t *testing.T) {
	s := newSandbox(t)
	data := gz(t, tarBytes(t, []tarEnt{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: "src/", typ: tar.TypeDir, mode: 0o750},
		{name: "src/main.go", typ: tar.TypeReg, body: "package main\n", mode: 0o644},
		{name: "bin/run.sh", typ: tar.TypeReg, body: "#!/bin/sh\n", mode: 0o755},
		{name: "src/link", typ: tar.TypeSymlink, link: "../bin/run.sh"},
		{name: "hard", typ: tar.TypeLink, link: "src/main.go"},
		{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
	}))
	res, err := s.extract(t, data, FormatTarGzip, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 7 || res.Bytes != int64(len("package main\n")+len("#!/bin/sh\n")) {
		t.Fatalf("result %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(s.copy, "src/link")); string(b) != "#!/bin/sh\n" {
		t.Fatalf("symlink content %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(s.copy, "bin/run.sh")); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(s.copy, "tmp")); fi.Mode()&fs.ModeSticky != 0 || fi.Mode().Perm() != 0o777 {
		t.Fatalf("tmp mode %v: the sticky bit is dropped", fi.Mode())
	}
	s.outsideUntouched(t)
}

// TestExtractAttacks is every classic archive attack: each refused with its code and
// nothing written outside the copy.
func TestExtractAttacks(t *testing.T) {
	big := Limits{MaxEntries: 10, MaxBytes: 1000, MaxFileBytes: 600}
	cases := []struct {
		name string
		ents []tarEnt
		lim  Limits
		code string
	}{
		{"absolute path", []tarEnt{{name: "/tmp/wb-archive-escape", typ: tar.TypeReg, body: "x"}}, Limits{}, string(actuation.CodeArchivePathAbsolute)},
		{"dotdot", []tarEnt{{name: "../outside/evil", typ: tar.TypeReg, body: "x"}}, Limits{}, string(actuation.CodeArchivePathTraversal)},
		{"dotdot inside", []tarEnt{{name: "a/../../outside/evil", typ: tar.TypeReg, body: "x"}}, Limits{}, string(actuation.CodeArchivePathTraversal)},
		{"symlink absolute", []tarEnt{{name: "l", typ: tar.TypeSymlink, link: "/etc"}}, Limits{}, string(actuation.CodeArchiveLinkEscape)},
		{"symlink climbs out", []tarEnt{{name: "a/l", typ: tar.TypeSymlink, link: "../../outside"}}, Limits{}, string(actuation.CodeArchiveLinkEscape)},
		{"write through symlink", []tarEnt{{name: "l", typ: tar.TypeSymlink, link: "."}, {name: "l/x", typ: tar.TypeReg, body: "x"}}, Limits{}, string(actuation.CodeArchiveLinkEscape)},
		{"symlink then same-name file", []tarEnt{{name: "l", typ: tar.TypeSymlink, link: "a"}, {name: "l", typ: tar.TypeReg, body: "x"}}, Limits{}, string(actuation.CodeArchiveDuplicateEntry)},
		{"hardlink out", []tarEnt{{name: "h", typ: tar.TypeLink, link: "../outside/keep"}}, Limits{}, string(actuation.CodeArchiveLinkEscape)},
		{"hardlink absolute", []tarEnt{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}}, Limits{}, string(actuation.CodeArchiveLinkEscape)},
		{"hardlink to nothing", []tarEnt{{name: "h", typ: tar.TypeLink, link: "nothing"}}, Limits{}, string(actuation.CodeArchiveLinkEscape)},
		{"hardlink to symlink", []tarEnt{{name: "l", typ: tar.TypeSymlink, link: "x"}, {name: "h", typ: tar.TypeLink, link: "l"}}, Limits{}, string(actuation.CodeArchiveLinkEscape)},
		{"char device", []tarEnt{{name: "null", typ: tar.TypeChar}}, Limits{}, string(actuation.CodeArchiveSpecialFile)},
		{"block device", []tarEnt{{name: "sda", typ: tar.TypeBlock}}, Limits{}, string(actuation.CodeArchiveSpecialFile)},
		{"fifo", []tarEnt{{name: "p", typ: tar.TypeFifo}}, Limits{}, string(actuation.CodeArchiveSpecialFile)},
		{"whiteout", []tarEnt{{name: "a/.wh.b", typ: tar.TypeReg, body: ""}}, Limits{}, string(actuation.CodeArchiveSpecialFile)},
		{"setuid", []tarEnt{{name: "su", typ: tar.TypeReg, body: "x", mode: 0o4755}}, Limits{}, string(actuation.CodeArchiveSetuid)},
		{"setgid dir", []tarEnt{{name: "d/", typ: tar.TypeDir, mode: 0o2755}}, Limits{}, string(actuation.CodeArchiveSetuid)},
		{"duplicate file", []tarEnt{{name: "a", typ: tar.TypeReg, body: "1"}, {name: "./a", typ: tar.TypeReg, body: "2"}}, Limits{}, string(actuation.CodeArchiveDuplicateEntry)},
		{"file then dir", []tarEnt{{name: "a", typ: tar.TypeReg, body: "1"}, {name: "a/b", typ: tar.TypeReg, body: "2"}}, Limits{}, string(actuation.CodeArchiveDuplicateEntry)},
		{"too many entries", func() []tarEnt {
			var e []tarEnt
			for i := 0; i < 11; i++ {
				e = append(e, tarEnt{name: strings.Repeat("f", i+1), typ: tar.TypeReg, body: "x"})
			}
			return e
		}(), big, string(actuation.CodeArchiveTooManyEntries)},
		{"bomb bytes", []tarEnt{{name: "a", typ: tar.TypeReg, size: 500}, {name: "b", typ: tar.TypeReg, size: 501}}, big, string(actuation.CodeArchiveTooLarge)},
		{"file too large", []tarEnt{{name: "a", typ: tar.TypeReg, size: 601}}, big, string(actuation.CodeArchiveFileTooLarge)},
		{"too deep", []tarEnt{{name: strings.Repeat("d/", 5) + "f", typ: tar.TypeReg, body: "x"}}, Limits{MaxDepth: 4}, string(actuation.CodeArchivePathInvalid)},
		{"nul in name", []tarEnt{{name: "a\x01b", typ: tar.TypeReg, body: "x"}}, Limits{}, string(actuation.CodeArchivePathInvalid)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSandbox(t)
			_, err := s.extract(t, tarBytes(t, c.ents), FormatTar, c.lim)
			if string(actuation.CodeOf(err)) != c.code {
				t.Fatalf("got %v (code %q), want code %q", err, string(actuation.CodeOf(err)), c.code)
			}
			s.outsideUntouched(t)
		})
	}
}

// TestExtractGzipBomb: a small gzip that inflates past the byte cap stops at the cap
// (counted on what is written, not on what headers say).
func TestExtractGzipBomb(t *testing.T) {
	s := newSandbox(t)
	data := gz(t, tarBytes(t, []tarEnt{{name: "zeros", typ: tar.TypeReg, size: 8 << 20}}))
	if len(data) > 64<<10 {
		t.Fatalf("bomb is %d bytes compressed", len(data))
	}
	_, err := s.extract(t, data, FormatTarGzip, Limits{MaxBytes: 1 << 20})
	if string(actuation.CodeOf(err)) != string(actuation.CodeArchiveFileTooLarge) && string(actuation.CodeOf(err)) != string(actuation.CodeArchiveTooLarge) {
		t.Fatalf("got %v", err)
	}
	var total int64
	_ = filepath.WalkDir(s.copy, func(p string, d fs.DirEntry, err error) error {
		if fi, e := d.Info(); e == nil && fi.Mode().IsRegular() {
			total += fi.Size()
		}
		return nil
	})
	if total > 1<<20 {
		t.Fatalf("%d bytes written past the 1 MiB cap", total)
	}
	s.outsideUntouched(t)
}

type zipEnt struct {
	name string
	mode fs.FileMode
	body string
}

func zipBytes(t *testing.T, ents []zipEnt) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range ents {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		m := e.mode
		if m == 0 {
			m = 0o644
		}
		h.SetMode(m)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(e.body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestExtractZip(t *testing.T) {
	s := newSandbox(t)
	_, err := s.extract(t, zipBytes(t, []zipEnt{{name: "d/", mode: fs.ModeDir | 0o755}, {name: "d/a.txt", body: "a"}, {name: "l", mode: fs.ModeSymlink | 0o777, body: "d/a.txt"}}), FormatZip, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(s.copy, "l")); string(b) != "a" {
		t.Fatalf("got %q", b)
	}
	cases := []struct {
		name string
		ents []zipEnt
		code string
	}{
		{"absolute", []zipEnt{{name: "/tmp/wb-archive-escape", body: "x"}}, string(actuation.CodeArchivePathAbsolute)},
		{"dotdot", []zipEnt{{name: "../outside/evil", body: "x"}}, string(actuation.CodeArchivePathTraversal)},
		{"backslash dotdot", []zipEnt{{name: "..\\outside\\evil", body: "x"}}, string(actuation.CodeArchivePathTraversal)},
		{"symlink out", []zipEnt{{name: "l", mode: fs.ModeSymlink | 0o777, body: "../outside"}}, string(actuation.CodeArchiveLinkEscape)},
		{"duplicate", []zipEnt{{name: "a", body: "1"}, {name: "a", body: "2"}}, string(actuation.CodeArchiveDuplicateEntry)},
		{"setuid", []zipEnt{{name: "a", mode: fs.ModeSetuid | 0o755, body: "1"}}, string(actuation.CodeArchiveSetuid)},
		{"fifo", []zipEnt{{name: "p", mode: fs.ModeNamedPipe | 0o644}}, string(actuation.CodeArchiveSpecialFile)},
		{"device", []zipEnt{{name: "d", mode: fs.ModeDevice | 0o644}}, string(actuation.CodeArchiveSpecialFile)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSandbox(t)
			_, err := s.extract(t, zipBytes(t, c.ents), FormatZip, Limits{})
			if string(actuation.CodeOf(err)) != c.code {
				t.Fatalf("got %v (code %q), want %q", err, string(actuation.CodeOf(err)), c.code)
			}
			s.outsideUntouched(t)
		})
	}
}

func TestExtractNotAnArchive(t *testing.T) {
	for _, f := range []string{FormatTarGzip, FormatZip, FormatTar} {
		s := newSandbox(t)
		_, err := s.extract(t, bytes.Repeat([]byte("not an archive "), 100), f, Limits{})
		if string(actuation.CodeOf(err)) != string(actuation.CodeArchiveInvalid) {
			t.Fatalf("%s: got %v", f, err)
		}
	}
}

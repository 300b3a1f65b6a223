package gitexport

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main",
		"-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, dir, rel, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// source makes a repository with one commit and returns its directory and commit.
func source(t *testing.T) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed on this machine")
	}
	src := t.TempDir()
	git(t, src, "init", "-q")
	write(t, src, "README.md", "hello\n", 0o644)
	write(t, src, "src/main.go", "package main\n\nfunc main() {}\n", 0o644)
	write(t, src, "old.txt", "to be deleted\n", 0o644)
	write(t, src, "run.sh", "#!/bin/sh\necho hi\n", 0o755)
	git(t, src, "add", "-A")
	git(t, src, "commit", "-q", "-m", "base")
	return src, git(t, src, "rev-parse", "HEAD")
}

// workspace clones src at its commit, as a materialized root would be.
func workspace(t *testing.T, src string) string {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	git(t, filepath.Dir(ws), "clone", "-q", src, ws)
	return ws
}

func export(t *testing.T, ws, base string, paths ...string) (*Result, []byte, error) {
	t.Helper()
	root, err := fsaccess.PinRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = root.Close() }()
	var out bytes.Buffer
	res, err := Patch(context.Background(), Request{Root: root, Base: base, Paths: paths, Subject: "export of ws",
		Date: time.Unix(1_700_000_000, 0), ScratchDir: t.TempDir()}, &out)
	return res, out.Bytes(), err
}

// TestPatchReproducesWorkspace: the exported patch, applied with `git apply` to a fresh
// clone of the source, reproduces the workspace (edits, a new file, a deletion, a mode
// change, a symlink, a binary file), and the same workspace exports the same bytes twice.
func TestPatchReproducesWorkspace(t *testing.T) {
	src, base := source(t)
	ws := workspace(t, src)
	write(t, ws, "README.md", "hello\nworld\n", 0o644)
	write(t, ws, "src/new.go", "package main\n\nvar x = 1\n", 0o644)
	write(t, ws, "bin.dat", "\x00\x01\x02binary\x00", 0o644)
	if err := os.Remove(filepath.Join(ws, "old.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(ws, "src/main.go"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src/main.go", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	// A nested ".git" file naming another repository is never followed or exported.
	write(t, ws, "vendor/x/.git", "gitdir: /etc\n", 0o644)
	res, patch, err := export(t, ws, base)
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	if res.Base != base || res.Files != 6 {
		t.Errorf("result %+v, want base %s and 6 files", res, base)
	}
	if !bytes.HasPrefix(patch, []byte("From ")) || !bytes.Contains(patch, []byte("Subject: [PATCH] export of ws")) {
		t.Errorf("not a git-format patch:\n%s", patch)
	}
	if bytes.Contains(patch, []byte("gitdir:")) {
		t.Errorf("a .git entry was exported:\n%s", patch)
	}
	fresh := workspace(t, src)
	pf := filepath.Join(t.TempDir(), "p.patch")
	if err := os.WriteFile(pf, patch, 0o600); err != nil {
		t.Fatal(err)
	}
	git(t, fresh, "apply", "--index", pf)
	for _, rel := range []string{"README.md", "src/new.go", "bin.dat", "src/main.go", "run.sh"} {
		a, _ := os.ReadFile(filepath.Join(ws, rel))
		b, err := os.ReadFile(filepath.Join(fresh, rel))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs after git apply (%v)", rel, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(fresh, "src/main.go")); err != nil || fi.Mode()&0o100 == 0 {
		t.Errorf("mode change not reproduced: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(fresh, "link")); err != nil || l != "src/main.go" {
		t.Errorf("symlink not reproduced: %q %v", l, err)
	}
	if _, err := os.Stat(filepath.Join(fresh, "old.txt")); !os.IsNotExist(err) {
		t.Errorf("deletion not reproduced: %v", err)
	}
	_, again, err := export(t, ws, base)
	if err != nil || !bytes.Equal(again, patch) {
		t.Errorf("a second export differs (%v)", err)
	}
	// Restricted to a FilePatch's files: only those.
	res, part, err := export(t, ws, base, "README.md", "old.txt")
	if err != nil || res.Files != 2 || bytes.Contains(part, []byte("new.go")) {
		t.Errorf("restricted export: %+v %v\n%s", res, err, part)
	}
	// HEAD of the root's repository when no base is given.
	res, _, err = export(t, ws, "")
	if err != nil || res.Base != base {
		t.Errorf("HEAD base: %+v %v", res, err)
	}
}

// TestPatchRefusals: each refused export names its code.
func TestPatchRefusals(t *testing.T) {
	src, base := source(t)
	ws := workspace(t, src)
	plain := t.TempDir()
	write(t, plain, "a.txt", "a\n", 0o644)
	gitfile := t.TempDir()
	write(t, gitfile, ".git", "gitdir: "+filepath.Join(ws, ".git")+"\n", 0o644)
	linked := t.TempDir()
	if err := os.Symlink(filepath.Join(ws, ".git"), filepath.Join(linked, ".git")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, dir, base string
		paths           []string
		code            actuation.Code
	}{
		{"not a repository", plain, "", nil, actuation.CodeExportBaseUnknown},
		{"gitfile to another repository", gitfile, "", nil, actuation.CodeExportBaseUnknown},
		{"symlinked .git", linked, "", nil, actuation.CodeExportBaseUnknown},
		{"unknown commit", ws, strings.Repeat("ab", 20), nil, actuation.CodeExportBaseUnknown},
		{"short commit", ws, base[:12], nil, actuation.CodeExportBaseUnknown},
		{"path into .git", ws, base, []string{".git/config"}, actuation.CodeExportInvalid},
		{"path climbing out", ws, base, []string{"../x"}, actuation.CodeExportInvalid},
	}
	for _, c := range cases {
		_, out, err := export(t, c.dir, c.base, c.paths...)
		if got := string(actuation.CodeOf(err)); got != string(c.code) {
			t.Errorf("%s: code %q (%v), want %s", c.name, got, err, c.code)
		}
		if len(out) != 0 {
			t.Errorf("%s: %d bytes written on refusal", c.name, len(out))
		}
	}
}

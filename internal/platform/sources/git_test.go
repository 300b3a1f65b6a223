package sources_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/sources"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

func gitFiles() map[string]string {
	return map[string]string{"README.md": "hello\n", "src/main.go": "package main\n", "src/link": "->main.go", "docs/a.txt": "a\n"}
}

func newDst(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "copy")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func newGit(t *testing.T) sources.Git {
	return sources.Git{Scratch: filepath.Join(t.TempDir(), "scratch")}
}

func TestGitFileByCommit(t *testing.T) {
	parent := t.TempDir()
	dir, ids := sourcetest.Repo(t, parent, "repo", gitFiles(), map[string]string{"README.md": "second\n"})
	dst := newDst(t)
	pol := sources.Policy{AllowedFileDirs: []string{parent}}
	res, err := newGit(t).MaterializeGit(context.Background(), sources.GitSource{URL: "file://" + dir, Commit: ids[0]}, pol, dst, sources.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resolved != ids[0] || res.Entries == 0 || res.Bytes == 0 {
		t.Fatalf("result %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "README.md")); string(b) != "hello\n" {
		t.Fatalf("README.md = %q: not the first commit", b)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "src/link")); l != "main.go" {
		t.Fatalf("symlink %q", l)
	}
	if head := sourcetest.Git(t, dst, "rev-parse", "HEAD"); head != ids[0] {
		t.Fatalf("HEAD %s", head)
	}
	hooks, err := os.ReadDir(filepath.Join(dst, ".git/hooks"))
	if err != nil || len(hooks) != 0 {
		t.Fatalf(".git/hooks: %v %v", hooks, err)
	}
	cfg, _ := os.ReadFile(filepath.Join(dst, ".git/config"))
	if string(cfg) != "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n" {
		t.Fatalf(".git/config not minimal: %q", cfg)
	}
	if strings.Contains(string(cfg), dir) {
		t.Fatal("the URL is in .git/config")
	}
}

func TestGitWrongCommitRefused(t *testing.T) {
	parent := t.TempDir()
	dir, _ := sourcetest.Repo(t, parent, "repo", gitFiles())
	pol := sources.Policy{AllowedFileDirs: []string{parent}}
	_, err := newGit(t).MaterializeGit(context.Background(), sources.GitSource{URL: "file://" + dir, Commit: strings.Repeat("ab", 20)}, pol, newDst(t), sources.Limits{})
	if string(actuation.CodeOf(err)) != string(actuation.CodeSourceCommitNotFound) {
		t.Fatalf("got %v", err)
	}
}

func TestGitPolicy(t *testing.T) {
	parent := t.TempDir()
	dir, ids := sourcetest.Repo(t, parent, "repo", gitFiles())
	g := newGit(t)
	ctx := context.Background()
	cases := []struct {
		name string
		src  sources.GitSource
		pol  sources.Policy
		code string
	}{
		{"file dir not allowed", sources.GitSource{URL: "file://" + dir, Commit: ids[0]}, sources.Policy{AllowedFileDirs: []string{"/nonexistent"}}, string(actuation.CodeSourceHostNotAllowed)},
		{"host not allowed", sources.GitSource{URL: "https://git.example.org/r.git", Commit: ids[0]}, sources.Policy{AllowedHosts: []string{"other.example.org"}}, string(actuation.CodeSourceHostNotAllowed)},
		{"plain http off loopback", sources.GitSource{URL: "http://git.example.org/r.git", Commit: ids[0]}, sources.Policy{AllowedHosts: []string{"git.example.org"}}, string(actuation.CodeSourceHostNotAllowed)},
		{"ref without policy", sources.GitSource{URL: "file://" + dir, Ref: "main"}, sources.Policy{AllowedFileDirs: []string{parent}}, string(actuation.CodeSourceRefNotAllowed)},
		{"credentials in url", sources.GitSource{URL: "https://u:p@git.example.org/r.git", Commit: ids[0]}, sources.Policy{AllowedHosts: []string{"git.example.org"}}, string(actuation.CodeSourceInvalid)},
		{"short commit", sources.GitSource{URL: "file://" + dir, Commit: ids[0][:12]}, sources.Policy{AllowedFileDirs: []string{parent}}, string(actuation.CodeSourceInvalid)},
		{"ext scheme", sources.GitSource{URL: "ext::sh -c touch% /tmp/pwned", Commit: ids[0]}, sources.Policy{AllowedHosts: []string{"*"}}, string(actuation.CodeSourceInvalid)},
		{"option host", sources.GitSource{URL: "ssh://-oProxyCommand=x/r", Commit: ids[0]}, sources.Policy{AllowedHosts: []string{"-oProxyCommand=x"}}, string(actuation.CodeSourceInvalid)},
		{"lfs declared", sources.GitSource{URL: "file://" + dir, Commit: ids[0], LFS: true}, sources.Policy{AllowedFileDirs: []string{parent}}, string(actuation.CodeSourceLFSRefused)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := newDst(t)
			_, err := g.MaterializeGit(ctx, c.src, c.pol, dst, sources.Limits{})
			if string(actuation.CodeOf(err)) != c.code {
				t.Fatalf("got %v, want %s", err, c.code)
			}
		})
	}
	// A ref where the policy allows it resolves to the commit.
	res, err := g.MaterializeGit(ctx, sources.GitSource{URL: "file://" + dir, Ref: "main"}, sources.Policy{AllowedFileDirs: []string{parent}, AllowRefs: true}, newDst(t), sources.Limits{})
	if err != nil || res.Resolved != ids[0] {
		t.Fatalf("ref main: %+v %v", res, err)
	}
}

func TestGitLFSAndLinksRefused(t *testing.T) {
	parent := t.TempDir()
	lfs, lids := sourcetest.Repo(t, parent, "lfs", map[string]string{".gitattributes": "*.bin filter=lfs diff=lfs merge=lfs -text\n", "a.bin": "x"})
	out, oids := sourcetest.Repo(t, parent, "out", map[string]string{"etc": "->/etc/passwd"})
	up, uids := sourcetest.Repo(t, parent, "up", map[string]string{"a/up": "->../../x"})
	pol := sources.Policy{AllowedFileDirs: []string{parent}}
	for _, c := range []struct {
		url, commit, code string
	}{{lfs, lids[0], string(actuation.CodeSourceLFSRefused)}, {out, oids[0], string(actuation.CodeArchiveLinkEscape)}, {up, uids[0], string(actuation.CodeArchiveLinkEscape)}} {
		_, err := newGit(t).MaterializeGit(context.Background(), sources.GitSource{URL: "file://" + c.url, Commit: c.commit}, pol, newDst(t), sources.Limits{})
		if string(actuation.CodeOf(err)) != c.code {
			t.Fatalf("%s: got %v, want %s", c.url, err, c.code)
		}
	}
}

func TestGitBounds(t *testing.T) {
	parent := t.TempDir()
	dir, ids := sourcetest.Repo(t, parent, "repo", map[string]string{"a": strings.Repeat("x", 2000), "b": "y", "c": "z"})
	pol := sources.Policy{AllowedFileDirs: []string{parent}}
	g := newGit(t)
	for _, c := range []struct {
		lim  sources.Limits
		code string
	}{{sources.Limits{MaxFileBytes: 1000, MaxBytes: 10000}, string(actuation.CodeArchiveFileTooLarge)}, {sources.Limits{MaxBytes: 1500}, string(actuation.CodeArchiveFileTooLarge)}, {sources.Limits{MaxEntries: 2}, string(actuation.CodeArchiveTooManyEntries)}} {
		dst := newDst(t)
		_, err := g.MaterializeGit(context.Background(), sources.GitSource{URL: "file://" + dir, Commit: ids[0]}, pol, dst, c.lim)
		if string(actuation.CodeOf(err)) != c.code {
			t.Fatalf("%+v: got %v, want %s", c.lim, err, c.code)
		}
		if _, err := os.Stat(filepath.Join(dst, "a")); err == nil {
			t.Fatalf("%+v: the tree was checked out before the bound refused it", c.lim)
		}
	}
}

func TestGitSparse(t *testing.T) {
	parent := t.TempDir()
	dir, ids := sourcetest.Repo(t, parent, "repo", gitFiles())
	dst := newDst(t)
	_, err := newGit(t).MaterializeGit(context.Background(), sources.GitSource{URL: "file://" + dir, Commit: ids[0], SparsePaths: []string{"docs"}}, sources.Policy{AllowedFileDirs: []string{parent}}, dst, sources.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, "src")); err == nil {
		t.Fatal("src/ checked out outside the sparse paths")
	}
	if _, err := os.Stat(filepath.Join(dst, "docs/a.txt")); err != nil {
		t.Fatal(err)
	}
}

// TestGitHTTPTokenNeverWritten fetches a private repository over smart HTTP with a token
// and looks for the token (and its Basic encoding) everywhere the checkout wrote.
func TestGitHTTPTokenNeverWritten(t *testing.T) {
	parent := t.TempDir()
	_, ids := sourcetest.Repo(t, parent, "private", gitFiles())
	const token = "tok-3f9a1c-never-in-the-workspace"
	srv := sourcetest.ServeGit(t, parent, token)
	pol := sources.Policy{AllowedHosts: []string{strings.TrimPrefix(srv.URL, "http://")}}
	g := newGit(t)

	_, err := g.MaterializeGit(context.Background(), sources.GitSource{URL: srv.URL + "/private", Commit: ids[0]}, pol, newDst(t), sources.Limits{})
	if string(actuation.CodeOf(err)) != string(actuation.CodeSourceFetchFailed) {
		t.Fatalf("without the token: %v", err)
	}
	_, err = g.MaterializeGit(context.Background(), sources.GitSource{URL: srv.URL + "/private", Commit: ids[0], Credentials: sources.GitCredentials{Token: "wrong"}}, pol, newDst(t), sources.Limits{})
	if string(actuation.CodeOf(err)) != string(actuation.CodeSourceCredentialsRejected) || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong token: %v", err)
	}
	dst := newDst(t)
	res, err := g.MaterializeGit(context.Background(), sources.GitSource{URL: srv.URL + "/private", Commit: ids[0], Credentials: sources.GitCredentials{Token: token}}, pol, dst, sources.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resolved != ids[0] {
		t.Fatalf("resolved %s", res.Resolved)
	}
	for _, secret := range []string{token, sourcetest.BasicToken(token)} {
		err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(p)
			if err == nil && bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the credential", p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if entries, _ := os.ReadDir(g.Scratch); len(entries) != 0 {
		t.Fatalf("scratch left: %v", entries)
	}
}

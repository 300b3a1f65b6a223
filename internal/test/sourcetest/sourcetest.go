// Package sourcetest serves workspace sources to tests on loopback: git repositories over
// smart HTTP (git http-backend behind net/http/cgi, with an optional bearer-style token
// checked as HTTP Basic) and an in-process OCI registry (go-containerregistry's
// pkg/registry).
package sourcetest

import (
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// HTTPBackend is git's smart HTTP server program.
const HTTPBackend = "/usr/lib/git-core/git-http-backend"

// Git runs git in dir with a fixed identity and no user configuration.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v: %s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Repo creates a repository <parent>/<name>.git (non-bare worktree at <parent>/<name>)
// from files (path -> content; content "->target" makes a symlink) in one commit per
// map, and returns the worktree dir and the commit ids.
func Repo(t testing.TB, parent, name string, commits ...map[string]string) (string, []string) {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	Git(t, dir, "init", "-q", "-b", "main")
	var ids []string
	for i, files := range commits {
		for p, c := range files {
			full := filepath.Join(dir, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			_ = os.Remove(full)
			if strings.HasPrefix(c, "->") {
				if err := os.Symlink(c[2:], full); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		Git(t, dir, "add", "-A")
		Git(t, dir, "commit", "-q", "--allow-empty", "-m", "commit "+string(rune('a'+i)))
		ids = append(ids, Git(t, dir, "rev-parse", "HEAD"))
	}
	return dir, ids
}

// GitServer serves the repositories under root (each <root>/<name>, a worktree or bare
// repository) over smart HTTP at <URL>/<name>. With a token, every request must carry
// HTTP Basic credentials whose password is the token (401 otherwise). Requests counts the
// requests served; Unauthorized those refused.
type GitServer struct {
	URL          string
	Requests     atomic.Int64
	Unauthorized atomic.Int64
	srv          *httptest.Server
}

// ServeGit starts a GitServer (closed with the test).
func ServeGit(t testing.TB, root, token string) *GitServer {
	t.Helper()
	if _, err := os.Stat(HTTPBackend); err != nil {
		t.Skipf("git http-backend not installed at %s: %v", HTTPBackend, err)
	}
	gs := &GitServer{}
	h := &cgi.Handler{Path: HTTPBackend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=" + root}}
	gs.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gs.Requests.Add(1)
		if token != "" {
			_, pw, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(pw), []byte(token)) != 1 {
				gs.Unauthorized.Add(1)
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(gs.srv.Close)
	gs.URL = gs.srv.URL
	return gs
}

// BasicToken is the Authorization value a client sends for token (what must never appear
// in a workspace, an event, a log or a status).
func BasicToken(token string) string {
	return base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
}

// ServeRegistry starts an in-process OCI registry on loopback and returns its host:port.
func ServeRegistry(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

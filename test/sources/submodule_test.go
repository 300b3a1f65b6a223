package sources

import (
	"os"
	"path/filepath"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// superRepo makes <parent>/<name> whose one commit holds README.md and a submodule "lib"
// pointing at subURL (a file:// remote), and returns its dir and commit.
func superRepo(t *testing.T, parent, name, subURL string) (string, string) {
	t.Helper()
	dir, _ := sourcetest.Repo(t, parent, name, map[string]string{"README.md": "super\n"})
	sourcetest.Git(t, dir, "-c", "protocol.file.allow=always", "submodule", "add", "-q", subURL, "lib")
	sourcetest.Git(t, dir, "commit", "-q", "-m", "add lib")
	return dir, sourcetest.Git(t, dir, "rev-parse", "HEAD")
}

// TestGitSourceSubmodulesDeclared (issue 28: "submodules only when declared", one level):
// through the API server and the agent, a repository with a file-based submodule is
// materialized with the submodule's tree at the recorded commit when the source declares
// submodules: Fetch; without the declaration the submodule's directory stays empty; a
// submodule whose URL is outside the node's allowlist is refused with
// source-host-not-allowed even though the superproject is allowed.
func TestGitSourceSubmodulesDeclared(t *testing.T) {
	subDir, subIDs := sourcetest.Repo(t, repos, "sm-lib", map[string]string{"lib.txt": "library\n"})
	super, commit := superRepo(t, repos, "sm-super", "file://"+subDir)

	copyOf := func(e *wbv1.Environment) string {
		t.Helper()
		copies, _ := filepath.Glob(filepath.Join(stateDir, "fixtures", string(e.UID), "repo", "fx-*"))
		if len(copies) != 1 {
			t.Fatalf("managed copies: %v", copies)
		}
		return copies[0]
	}

	t.Run("declared", func(t *testing.T) {
		ns := namespace(t)
		sourcedEnvironment(t, ns, wbv1.EnvironmentRoot{Git: &wbv1.GitRootSource{URL: "file://" + super, Commit: ptr(commit), Submodules: wbv1.GitSubmodulesFetch}})
		e := waitEnvironment(t, ns)
		if e.Status.Phase != wbv1.EnvironmentReady || len(e.Status.Roots) != 1 || e.Status.Roots[0].Resolved != commit {
			t.Fatalf("status = %s", statusJSON(e))
		}
		dir := copyOf(e)
		if b, err := os.ReadFile(filepath.Join(dir, "lib", "lib.txt")); err != nil || string(b) != "library\n" {
			t.Fatalf("lib/lib.txt: %q %v", b, err)
		}
		if head := sourcetest.Git(t, filepath.Join(dir, "lib"), "rev-parse", "HEAD"); head != subIDs[0] {
			t.Fatalf("the submodule is at %s, the superproject records %s", head, subIDs[0])
		}
		if hooks, err := os.ReadDir(filepath.Join(dir, ".git", "hooks")); err != nil || len(hooks) != 0 {
			t.Fatalf(".git/hooks: %v %v", hooks, err)
		}
	})

	t.Run("undeclared", func(t *testing.T) {
		ns := namespace(t)
		sourcedEnvironment(t, ns, wbv1.EnvironmentRoot{Git: &wbv1.GitRootSource{URL: "file://" + super, Commit: ptr(commit)}})
		e := waitEnvironment(t, ns)
		if e.Status.Phase != wbv1.EnvironmentReady {
			t.Fatalf("status = %s", statusJSON(e))
		}
		ents, err := os.ReadDir(filepath.Join(copyOf(e), "lib"))
		if err != nil || len(ents) != 0 {
			t.Fatalf("an undeclared submodule was fetched: lib/ holds %v (%v)", ents, err)
		}
	})

	t.Run("submodule outside the allowlist", func(t *testing.T) {
		outside := t.TempDir() // not an allowed file dir
		odir, _ := sourcetest.Repo(t, outside, "evil-lib", map[string]string{"x": "x\n"})
		osuper, ocommit := superRepo(t, repos, "sm-evil", "file://"+odir)
		ns := namespace(t)
		sourcedEnvironment(t, ns, wbv1.EnvironmentRoot{Git: &wbv1.GitRootSource{URL: "file://" + osuper, Commit: ptr(ocommit), Submodules: wbv1.GitSubmodulesFetch}})
		wantFailedWith(t, waitEnvironment(t, ns), actuation.CodeSourceHostNotAllowed)
	})
}

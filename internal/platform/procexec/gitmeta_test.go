package procexec

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
)

// gitFixture builds a workspace with a repository, a submodule's git directory under
// .git/modules, a submodule worktree whose .git is a gitdir file, and a nested repository
// without hooks/ or info/; it returns the root and a snapshot function of what must stay.
func gitFixture(t *testing.T) (string, func() map[string]string) {
	t.Helper()
	root := t.TempDir()
	mk := func(rel, content string, mode os.FileMode) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, gd := range []string{".git", ".git/modules/sub", ".git/modules/a/b"} {
		mk(gd+"/HEAD", "ref: refs/heads/main\n", 0o644)
		mk(gd+"/config", "[core]\n\trepositoryformatversion = 0\n", 0o644)
		mk(gd+"/hooks/pre-commit.sample", "#!/bin/sh\n", 0o755)
		mk(gd+"/info/exclude", "# exclude\n", 0o644)
		if err := os.MkdirAll(filepath.Join(root, gd, "objects"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk("sub/.git", "gitdir: ../.git/modules/sub\n", 0o644)
	mk(".git/worktrees/wt/HEAD", "ref: refs/heads/wt\n", 0o644)
	mk(".git/worktrees/wt/commondir", "../..\n", 0o644)
	mk(".git/worktrees/wt/gitdir", "/elsewhere/wt/.git\n", 0o644)
	mk("nested/deep/.git/HEAD", "ref: refs/heads/main\n", 0o644)
	mk("nested/deep/.git/config", "[core]\n", 0o644)
	mk("src/main.c", "int main(){}\n", 0o644)
	snap := func() map[string]string {
		m := map[string]string{}
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			// What git executes or is redirected by (HEAD and objects are data: a writable
			// root may lose them).
			switch filepath.Base(rel) {
			case "hooks", "info", "config", "commondir", "modules", "worktrees", ".git", "post-checkout", "pre-commit.sample", "exclude", "attributes":
			default:
				if !strings.Contains(rel, "/hooks/") && !strings.Contains(rel, "/info/") {
					return nil
				}
			}
			v := fi.Mode().String()
			if fi.Mode().IsRegular() {
				b, _ := os.ReadFile(p)
				v += ":" + string(b)
			}
			m[rel] = v
			return nil
		})
		return m
	}
	return root, snap
}

// gitAttack tries every way of changing what git would run: write, replace and rename
// hooks, config, info, commondir, the gitdir file, and moving git directories aside.
const gitAttack = `
cd "$ROOT"
try() { if "$@" 2>/dev/null; then echo "BREACH: $*"; fi; }
for g in .git .git/modules/sub .git/modules/a/b nested/deep/.git; do
  try sh -c "printf '#!/bin/sh\ntouch /tmp/pwned\n' > $g/hooks/post-checkout"
  try sh -c "echo x >> $g/hooks/pre-commit.sample"
  try mkdir $g/hooks/x
  try mv $g/hooks $g/hooks.old
  try rm -rf $g/hooks
  try sh -c "echo '[core] fsmonitor = touch /tmp/pwned' >> $g/config"
  try sh -c "echo '[core]' > $g/config.new && mv -f $g/config.new $g/config"
  try rm -f $g/config
  try mv $g/config $g/config.old
  try sh -c "echo evil > $g/info/attributes"
  try mv $g/info $g/info.old
done
try sh -c "echo /tmp/evil > .git/worktrees/wt/commondir"
try mv .git/worktrees/wt .git/worktrees/wt.old
try mv .git/worktrees .git/worktrees.old
try sh -c "echo 'gitdir: ../evil' > sub/.git"
try mv sub/.git sub/git.old
try mv .git/modules .git/modules.old
try mv .git/modules/sub .git/modules/sub.old
try mv .git .git.old
try mv nested/deep/.git nested/deep/git.old
try rm -rf .git
mkdir -p newrepo/.git/hooks && echo ok > newrepo/.git/hooks/x && echo created-new-repo
echo src-writable >> src/main.c && echo src-ok
echo done
`

// TestGitMetadataReadOnly: a sandboxed program cannot change, replace or move aside the
// git metadata of any repository under a writable root (a host snapshot is unchanged),
// while the rest of the root stays writable; with GitMetadataWritable it can.
func TestGitMetadataReadOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandbox mounts need root (as CI runs)")
	}
	root, snap := gitFixture(t)
	before := snap()
	res, err := NewRunner(Limits{}).Run(context.Background(), Spec{
		Argv:          []string{"/bin/sh", "-c", gitAttack},
		Env:           []string{"PATH=/usr/bin:/bin", "ROOT=" + root},
		Dir:           root,
		Timeout:       60 * time.Second,
		WritableRoots: []string{root},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Output)
	if strings.Contains(out, "BREACH") || !strings.Contains(out, "done") || !strings.Contains(out, "src-ok") {
		t.Errorf("sandbox output:\n%s", out)
	}
	after := snap()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed on the host: %q -> %q", k, v, after[k])
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok && !strings.HasPrefix(k, "newrepo") && !strings.HasSuffix(k, "config.new") &&
			!(strings.HasPrefix(k, "nested/deep/.git/") && (strings.HasSuffix(k, "/hooks") || strings.HasSuffix(k, "/info"))) {
			t.Errorf("%s appeared on the host", k)
		}
	}
	// The opt-in: the same attack changes metadata.
	res, err = NewRunner(Limits{}).Run(context.Background(), Spec{
		Argv:    []string{"/bin/sh", "-c", `printf '#!/bin/sh\n' > "$ROOT/.git/hooks/post-checkout" && echo wrote`},
		Env:     []string{"PATH=/usr/bin:/bin", "ROOT=" + root},
		Dir:     root,
		Timeout: 30 * time.Second, WritableRoots: []string{root}, GitMetadataWritable: true,
	})
	if err != nil || !strings.Contains(string(res.Output), "wrote") {
		t.Errorf("gitMetadata Writable: %v %q", err, res.Output)
	}
}

// TestGitMetadataWalkBounded: more repositories than MaxGitRepos under the writable roots
// refuse the start (git-metadata-unbounded) and nothing runs.
func TestGitMetadataWalkBounded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandbox mounts need root (as CI runs)")
	}
	root := t.TempDir()
	for i := 0; i <= MaxGitRepos; i++ {
		if err := os.MkdirAll(filepath.Join(root, "r"+strconv.Itoa(i), ".git", "hooks"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	res, err := NewRunner(Limits{}).Run(context.Background(), Spec{
		Argv: []string{"/bin/sh", "-c", "touch " + root + "/ran"}, Env: []string{"PATH=/usr/bin:/bin"},
		Dir: root, Timeout: 30 * time.Second, WritableRoots: []string{root},
	})
	if err == nil {
		t.Fatalf("started with %d repositories: %q", MaxGitRepos+1, res.Output)
	}
	if actuation.CodeOf(err) != actuation.CodeGitMetadataUnbounded {
		t.Errorf("refusal = %v, want %s", err, actuation.CodeGitMetadataUnbounded)
	}
	if _, err := os.Stat(filepath.Join(root, "ran")); err == nil {
		t.Error("the program ran")
	}
}

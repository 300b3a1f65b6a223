package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// TestResolvedExecutableClassified (issue 25 item 2): the node classifies the program it
// would start, through a real symlink: a profile for "/…/js" that admits "-e" (js is in no
// table) is refused once js resolves to nodejs; a link to a shell is refused; a link named
// "vcs" resolving to git gets git's rules and the node's pinned git configuration.
func TestResolvedExecutableClassified(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"nodejs", "dash", "git"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, target string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(filepath.Join(dir, target), p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	js, sh, vcs := link("js", "nodejs"), link("tool", "dash"), link("vcs", "git")
	prof := func(exe string, prefixes ...string) actuation.Profile {
		return actuation.Profile{Executable: exe, AllowedArgPrefixes: prefixes, AllowedRoots: []string{"repo"}}
	}
	cases := []struct {
		p    actuation.Profile
		argv []string
		ok   bool
	}{
		{prof(js, "-"), []string{js, "-e", "1"}, false},
		{prof(js, "src/"), []string{js, "src/a.js"}, true},
		{prof(js, "src/"), []string{js, "src/a.js", "--eval=x"}, false}, // an argv a grant admitted
		{prof(sh, "x"), []string{sh, "x"}, false},
		{prof(vcs, "status", "-"), []string{vcs, "status"}, false}, // prefix "-" admits -c for git
		{prof(vcs, "status"), []string{vcs, "status"}, true},
		{prof(vcs, "status", "st"), []string{vcs, "st"}, false}, // an alias
	}
	for i, c := range cases {
		r := actuation.CheckResolvedExecutable(c.p, resolveExecutable(c.argv[0]), c.argv)
		if (r == nil) != c.ok || (r != nil && r.Code != actuation.CodeShellString) {
			t.Errorf("case %d %q: refusal %v, want ok=%v", i, c.argv, r, c.ok)
		}
	}
	env := gitPinnedEnv(vcs, resolveExecutable(vcs), []actuation.EnvVar{{Name: "PATH", Value: "/usr/bin"}})
	if !strings.Contains(envString(env), "safe.bareRepository") {
		t.Errorf("a link to git runs without the pinned git configuration: %v", env)
	}
	if env := gitPinnedEnv(js, resolveExecutable(js), nil); len(env) != 0 {
		t.Errorf("pinned git configuration for nodejs: %v", env)
	}
}

func envString(env []actuation.EnvVar) string {
	var b strings.Builder
	for _, e := range env {
		b.WriteString(e.Name + "=" + e.Value + "\n")
	}
	return b.String()
}

// TestEmbeddedBareRepositoryRunsNothing (issue 25 item 2): a bare repository planted in a
// workspace (HEAD, objects/, refs/, config with core.worktree, core.fsmonitor and a hook)
// runs nothing when the node's own git-admitted command (git status, real git in the real
// sandbox) runs in it: a marker proves it.
func TestEmbeddedBareRepositoryRunsNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandboxed processes need root (as CI runs)")
	}
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git on this machine")
	}
	root := t.TempDir()
	evil := filepath.Join(root, "vendor", "evil")
	for _, d := range []string{"objects", "refs/heads", "hooks"} {
		if err := os.MkdirAll(filepath.Join(evil, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	marker := filepath.Join(root, "PWNED")
	payload := "#!/bin/sh\necho ran > " + marker + "\n"
	files := map[string]string{
		"HEAD":                    "ref: refs/heads/main\n",
		"config":                  "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n\tfsmonitor = " + filepath.Join(evil, "fsmon") + "\n\thooksPath = " + filepath.Join(evil, "hooks") + "\n[alias]\n\tst = !" + filepath.Join(evil, "fsmon") + "\n",
		"fsmon":                   payload,
		"hooks/post-index-change": payload,
		"hooks/pre-auto-gc":       payload,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(evil, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(env []actuation.EnvVar) string {
		kv := []string{}
		for _, e := range env {
			kv = append(kv, e.Name+"="+e.Value)
		}
		res, err := procexec.NewRunner(procexec.Limits{}).Run(context.Background(), procexec.Spec{
			Argv: []string{gitPath, "--no-pager", "status"}, Env: kv, Dir: evil,
			Timeout: 60 * time.Second, WritableRoots: []string{root}, TempDirEnv: "TMPDIR",
		})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Output)
	}
	base := []actuation.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "HOME", Value: "/tmp"}}
	out := run(gitPinnedEnv(gitPath, resolveExecutable(gitPath), base))
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("the embedded repository's fsmonitor or hook ran under the node's git (output %q)", out)
	}
	if !strings.Contains(out, "safe.bareRepository") && !strings.Contains(out, "not a git repository") && !strings.Contains(out, "cannot use bare repository") {
		t.Logf("git status output: %q", out)
	}
}

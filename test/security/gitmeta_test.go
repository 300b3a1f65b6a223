package security

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// Issue 25 item 2 through the API server and the running node agent: a hostile
// repository's Makefile attacks the repository metadata the host's own git executes, and
// a planted embedded bare repository waits for the node's git-admitted command.

// Makefile targets of the git attacks.
const (
	targetGitAttack = "gitattack" // the attack as a command
	targetGitPTY    = "gitpty"    // the attack as a PTY program, then stays alive
	targetPlant     = "plant"     // plants an embedded bare repository in vendor/evil
)

// gitAttackScript tries every way of leaving something the host's git would run: a hook,
// config keys that run programs, info/attributes and exclude, and moving hooks/ or the
// whole .git aside to recreate them. Each attempt that succeeds prints BREACH.
const gitAttackScript = `try() { if sh -c "$1" 2>/dev/null; then printf 'BREACH: %s\n' "$1"; fi; }
hook='#!/bin/sh\necho hook-ran > /tmp/hook-ran\n'
try "printf '$hook' > .git/hooks/post-checkout && chmod 755 .git/hooks/post-checkout"
try "printf '$hook' >> .git/hooks/pre-commit.sample"
try "printf '[core]\n\tfsmonitor = ./evil-fsmonitor\n' >> .git/config"
try "printf '[core]\n\thooksPath = ./evil-hooks\n' >> .git/config"
try "git config --file .git/config core.fsmonitor ./evil-fsmonitor"
try "cp .git/config .git/config.new && printf '[core]\n\thooksPath = ./evil-hooks\n' >> .git/config.new && mv -f .git/config.new .git/config"
try "echo '* filter=evil' > .git/info/attributes"
try "echo '!evil' >> .git/info/exclude"
try "mv .git/hooks .git/hooks-aside && mkdir .git/hooks && printf '$hook' > .git/hooks/post-checkout && chmod 755 .git/hooks/post-checkout"
try "mv .git/info .git/info-aside && mkdir .git/info && echo '* filter=evil' > .git/info/attributes"
try "rm -rf .git/hooks"
try "rm -f .git/config"
try "mv .git .git-aside && mkdir -p .git/hooks && cp -r .git-aside/objects .git-aside/refs .git-aside/HEAD .git/ && printf '$hook' > .git/hooks/post-checkout && chmod 755 .git/hooks/post-checkout && printf '[core]\n\tfsmonitor = ./evil-fsmonitor\n' > .git/config"
try "printf '$hook' > .git/hooks-new && chmod 755 .git/hooks-new && printf '[core]\n\thooksPath = .git/hooks-new\n' >> .git/config"
echo gitattack-ran
`

// plantScript plants an embedded bare repository (HEAD, objects/, refs/, config with
// core.worktree, core.fsmonitor and core.hooksPath naming a script) under vendor/evil; the
// script writes PWNED at the root when anything runs it.
const plantScript = `set -e
r="$(pwd)"; d="$r/vendor/evil"
mkdir -p "$d/objects/info" "$d/objects/pack" "$d/refs/heads" "$d/refs/tags" "$d/hooks"
printf 'ref: refs/heads/main\n' > "$d/HEAD"
printf '#!/bin/sh\necho ran > %s/PWNED\n' "$r" > "$d/fsmon"
chmod 755 "$d/fsmon"
for h in post-index-change pre-auto-gc post-checkout reference-transaction; do cp "$d/fsmon" "$d/hooks/$h"; done
printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n\tfsmonitor = %s\n\thooksPath = %s\n' "$d/fsmon" "$d/hooks" > "$d/config"
echo planted
`

// gitRepository is a fresh hostile repository with a real .git (git init on the host, one
// commit, as an operator's checkout) and the attack targets in its Makefile.
func gitRepository(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("missing property: no git on this node — the host's git is what the attack targets")
	}
	dir := workDir(t, "unused")
	must(t, os.WriteFile(filepath.Join(dir, "gitattack.sh"), []byte(gitAttackScript), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "plant.sh"), []byte(plantScript), 0o644))
	f, err := os.OpenFile(filepath.Join(dir, "Makefile"), os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = fmt.Fprintf(f, "%s:\n\tsh ./gitattack.sh\n%s:\n\tsh ./gitattack.sh; echo '{\"probe\":\"done\"}'; exec ./probe sleep\n%s:\n\tsh ./plant.sh\n",
		targetGitAttack, targetGitPTY, targetPlant)
	must(t, err)
	must(t, f.Close())
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "Makefile"},
		{"-c", "user.name=op", "-c", "user.email=op@example.invalid", "commit", "-q", "-m", "init"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// gitProfiles creates the profiles of the git attacks: make-git runs the attack targets
// as commands, make-git-pty runs gitpty as a PTY program, git runs `git --no-pager status`.
// meta is the profiles' gitMetadata policy ("" is the default, ReadOnly).
func gitProfiles(t *testing.T, ns string, meta wbv1.GitMetadataPolicy) {
	t.Helper()
	ctx := context.Background()
	cmd := makeProfile(ns, "make-git", []string{"-s"}, false)
	cmd.Spec.AllowedArgPrefixes = []string{targetGitAttack, targetPlant}
	cmd.Spec.GitMetadata = meta
	pty := makeProfile(ns, "make-git-pty", []string{"-s", targetGitPTY}, true)
	pty.Spec.GitMetadata = meta
	g := &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/usr/bin/git", FixedArgs: []string{"--no-pager"}, AllowedArgPrefixes: []string{"status"},
		AllowedRoots:      []string{"repo"},
		Env:               wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "LANG", Value: "C.UTF-8"}, {Name: "PATH", Value: "/usr/bin:/bin"}}},
		MaxTimeoutSeconds: 60, MaxOutputBytes: outputCap, GitMetadata: meta,
	}}
	for _, p := range []*wbv1.CommandProfile{cmd, pty, g} {
		must(t, env.Client.Create(ctx, p))
	}
}

// runCommand runs argv under profile as a TerminalCommand of session s (cwd path beneath
// root repo) and returns its final state and output.
func runCommand(t *testing.T, ns, name, profile, cwd string, argv ...string) (*wbv1.TerminalCommand, string) {
	t.Helper()
	return runSpec(t, ag, ns, name, wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: wbv1.ObjectName(profile), Argv: argv,
		Cwd: wbv1.CwdAddress{Root: "repo", Path: wbv1.RelativePath(cwd)}, TimeoutSeconds: 60, OutputBytes: outputCap})
}

// commandRoot is where the environment's root lives on the host: the host path itself on
// host-local, the agent's managed copy (state dir fixtures/<uid>/repo/fx-*) on fixture-copy.
func commandRoot(t *testing.T, ns, dir string, backend wbv1.BackendID) string {
	t.Helper()
	if backend != wbv1.BackendFixtureCopy {
		return dir
	}
	var e wbv1.Environment
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "e"}, &e))
	copies, err := filepath.Glob(filepath.Join(stateDir, "fixtures", string(e.UID), "repo", "fx-*"))
	must(t, err)
	if len(copies) != 1 {
		t.Fatalf("want exactly one managed copy of environment %s, found %v", e.UID, copies)
	}
	return copies[0]
}

// treeDigest maps every entry under root/.git (and any sibling named .git*) to its type,
// permission bits and content digest (a symlink to its target).
func treeDigest(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ents, err := os.ReadDir(root)
	must(t, err)
	for _, top := range ents {
		if !strings.HasPrefix(top.Name(), ".git") {
			continue
		}
		must(t, filepath.WalkDir(filepath.Join(root, top.Name()), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			v := fi.Mode().String()
			switch {
			case fi.Mode().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				sum := sha256.Sum256(b)
				v += " " + hex.EncodeToString(sum[:])
			case fi.Mode()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				v += " -> " + target
			}
			out[rel] = v
			return nil
		}))
	}
	return out
}

// diffDigests lists what changed between two tree digests.
func diffDigests(before, after map[string]string) []string {
	var d []string
	for p, v := range before {
		if w, ok := after[p]; !ok {
			d = append(d, "removed "+p)
		} else if w != v {
			d = append(d, fmt.Sprintf("changed %s (%s => %s)", p, v, w))
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			d = append(d, "added "+p)
		}
	}
	sort.Strings(d)
	return d
}

// hooks lists the hooks git would run from root's repository: executables in .git/hooks
// not named *.sample (core.hooksPath and core.fsmonitor live in .git/config, compared byte
// for byte).
func hooks(root string) []string {
	var out []string
	ms, _ := filepath.Glob(filepath.Join(root, ".git", "hooks", "*"))
	for _, m := range ms {
		fi, err := os.Lstat(m)
		if err == nil && !strings.HasSuffix(m, ".sample") && fi.Mode()&0o111 != 0 {
			out = append(out, m)
		}
	}
	return out
}

// executedMetadata reports whether a path of a tree digest (relative to the root) is
// metadata the host's git executes or trusts: the git directory itself (a .git moved
// aside or replaced shows as added or removed entries), its config, commondir,
// config.worktree, hooks/ and info/. The rest of .git (index, objects, refs, logs, a
// command's scratch files) is writable by design: git commands write it.
func executedMetadata(rel string) bool {
	parts := strings.Split(rel, string(filepath.Separator))
	if parts[0] != ".git" || len(parts) == 1 {
		return true // .git itself, or a .git* sibling: a git directory moved aside or planted
	}
	switch parts[1] {
	case "config", "commondir", "config.worktree", "hooks", "info":
		return true
	}
	return false
}

// assertGitUnchanged fails when the attack got anything into the repository metadata.
func assertGitUnchanged(t *testing.T, where, root string, before map[string]string, out string) {
	t.Helper()
	if !strings.Contains(out, "gitattack-ran") {
		t.Fatalf("%s: the attack did not run to its end (the test proves nothing); output %q", where, tail(out))
	}
	var breaches []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "BREACH") {
			breaches = append(breaches, strings.TrimSpace(strings.TrimRight(l, "\r")))
		}
	}
	if len(breaches) > 0 {
		t.Errorf("%s: %d attempt(s) wrote repository metadata from inside the sandbox:\n  %s", where, len(breaches), strings.Join(breaches, "\n  "))
	}
	var bad, other []string
	for _, d := range diffDigests(before, treeDigest(t, root)) {
		if executedMetadata(strings.Fields(d)[1]) {
			bad = append(bad, d)
		} else {
			other = append(other, d)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s: the host's git metadata is not byte-identical after the command:\n  %s", where, strings.Join(bad, "\n  "))
	}
	if len(other) > 0 {
		t.Logf("%s: writable-by-design parts of .git changed (nothing git executes): %s", where, strings.Join(other, "; "))
	}
	if h := hooks(root); len(h) > 0 {
		t.Errorf("%s: the host holds hooks its git would run: %v", where, h)
	}
}

// gitEnvironment makes a namespace with an Environment of backend over a fresh git
// repository (dir) and the git profiles, and returns them with the root a command runs in
// (the managed copy, on fixture-copy.v1).
func gitEnvironment(t *testing.T, backend wbv1.BackendID) (ns, dir, root string) {
	t.Helper()
	ns = namespace(t)
	dir = gitRepository(t)
	environment(t, ns, dir, backend, nil)
	gitProfiles(t, ns, "")
	return ns, dir, commandRoot(t, ns, dir, backend)
}

// TestGitMetadataHostOwnedForCommands: the hostile Makefile's attack on .git, run as a
// TerminalCommand on host-local and fixture-copy.v1, leaves every file of the host's .git
// (of the managed copy, on fixture-copy) byte-identical, and no hook.
func TestGitMetadataHostOwnedForCommands(t *testing.T) {
	requireProcessSandbox(t)
	eachBackend(t, func(t *testing.T, bc backendCase) {
		ns, dir, root := gitEnvironment(t, bc.backend)
		before := treeDigest(t, root)
		if len(before) < 10 {
			t.Fatalf("the repository has no .git to attack (%d entries under %s)", len(before), root)
		}
		c, out := runCommand(t, ns, "attack", "make-git", "", "/usr/bin/make", "-s", targetGitAttack)
		if c.Status.Phase == wbv1.CommandRefused {
			t.Fatalf("the command was refused before it ran (%+v): the attack proves nothing", c.Status.Refusal)
		}
		assertGitUnchanged(t, bc.name+" command", root, before, out)
		if bc.backend == wbv1.BackendFixtureCopy {
			// The source is never written by a fixture-copy command, whatever it does.
			if h := hooks(dir); len(h) > 0 {
				t.Errorf("the fixture source holds hooks: %v", h)
			}
		}
	})
}

// TestGitMetadataHostOwnedForPTYPrograms: the same attack as a TerminalSession's PTY
// program. On fixture-copy.v1 a PTY program is either refused outright (nothing runs, the
// code is capability-mismatch) or the .git stays byte-identical.
func TestGitMetadataHostOwnedForPTYPrograms(t *testing.T) {
	requireProcessSandbox(t)
	eachBackend(t, func(t *testing.T, bc backendCase) {
		ns, _, root := gitEnvironment(t, bc.backend)
		before := treeDigest(t, root)
		s := openPTY(t, ns, "make-git-pty")
		if s.Status.Refusal != nil {
			if bc.backend == wbv1.BackendFixtureCopy && s.Status.Refusal.Code == "capability-mismatch" {
				t.Logf("fixture-copy.v1 refuses PTY programs (%s: %s): nothing ran", s.Status.Refusal.Code, s.Status.Refusal.Message)
				if d := diffDigests(before, treeDigest(t, root)); len(d) > 0 {
					t.Errorf("the copy's .git changed although nothing ran: %v", d)
				}
				return
			}
			t.Fatalf("the PTY session was refused (%+v): the attack proves nothing", s.Status.Refusal)
		}
		if s.Status.Phase != wbv1.SessionRunning {
			t.Fatalf("the PTY session ended before its output could be read: %+v", s.Status)
		}
		out := readPTY(t, ns, "pty")
		assertGitUnchanged(t, bc.name+" PTY program", root, before, out)
		closeSession(t, ns, "pty")
	})
}

// TestGitEmbeddedBareRepositoryRunsNothing: a previous command plants an embedded bare
// repository whose config names an fsmonitor and a hooks path (a script writing PWNED);
// the node's own git-admitted command (`git --no-pager status` with its cwd in that
// directory) then runs, its outcome is recorded, and PWNED does not exist.
func TestGitEmbeddedBareRepositoryRunsNothing(t *testing.T) {
	requireProcessSandbox(t)
	eachBackend(t, func(t *testing.T, bc backendCase) {
		ns, _, root := gitEnvironment(t, bc.backend)
		c, out := runCommand(t, ns, "plant", "make-git", "", "/usr/bin/make", "-s", targetPlant)
		if c.Status.Phase != wbv1.CommandSucceeded || !strings.Contains(out, "planted") {
			t.Fatalf("the bare repository was not planted (the test proves nothing): %+v %q", c.Status, tail(out))
		}
		if _, err := os.Stat(filepath.Join(root, "vendor", "evil", "config")); err != nil {
			t.Fatalf("the planted repository is not on the host: %v", err)
		}
		c, out = runCommand(t, ns, "status", "git", "vendor/evil", "/usr/bin/git", "--no-pager", "status")
		if c.Status.Phase == wbv1.CommandRefused {
			t.Fatalf("the node's git command was refused before it ran (%+v): the attack proves nothing", c.Status.Refusal)
		}
		if c.Status.ExitCode == nil {
			t.Fatalf("the git command's outcome records no exit code: %+v", c.Status)
		}
		t.Logf("git status in the embedded repository: phase %s, exit %d, output %q", c.Status.Phase, *c.Status.ExitCode, tail(out))
		if b, err := os.ReadFile(filepath.Join(root, "PWNED")); err == nil {
			t.Errorf("the embedded repository's fsmonitor or hook ran under the node's git (PWNED %q; output %q)", b, tail(out))
		}
	})
}

// TestGitMetadataWritableOptIn: a profile with spec.gitMetadata Writable lets the same
// attack write through (the operator's explicit opt-in; and the proof that the assertions
// above can fail).
func TestGitMetadataWritableOptIn(t *testing.T) {
	requireProcessSandbox(t)
	ns := namespace(t)
	dir := gitRepository(t)
	environment(t, ns, dir, wbv1.BackendHostLocal, nil)
	gitProfiles(t, ns, wbv1.GitMetadataWritable)
	before := treeDigest(t, dir)
	c, out := runCommand(t, ns, "attack", "make-git", "", "/usr/bin/make", "-s", targetGitAttack)
	if c.Status.Phase == wbv1.CommandRefused || !strings.Contains(out, "gitattack-ran") {
		t.Fatalf("the command did not run (%+v): %q", c.Status, tail(out))
	}
	if !strings.Contains(out, "BREACH: printf") || !strings.Contains(out, ".git/hooks/post-checkout") {
		t.Errorf("with gitMetadata Writable the hook was not written: output %q", tail(out))
	}
	if d := diffDigests(before, treeDigest(t, dir)); len(d) == 0 {
		t.Error("with gitMetadata Writable the .git is unchanged: the opt-in does not work")
	}
	if len(hooks(dir)) == 0 {
		t.Error("with gitMetadata Writable no hook reached the host")
	}
}

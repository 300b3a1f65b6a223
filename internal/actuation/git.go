package actuation

import (
	"path"
	"slices"
	"strings"
)

// git is a code runner too (issue 25 item 2): its options and configuration keys can run
// a command chosen by whoever writes the argv. The table below is the inline-code rule for
// git; GitPinnedConfig is what the node fixes whenever the (symlink-resolved) executable
// is git, whatever the profile says.
//
//   - Options that run code or redirect git to other code, refused in any position of a
//     concrete argv and as any fixed atom or prefix that could grow into them, with their
//     "=value" and attached forms and long-option abbreviations: -c, --config-env,
//     --exec-path, -C, --git-dir, --work-tree, --upload-pack/-u, --receive-pack, --exec/-x
//     (rebase, archive), --extcmd (difftool), --template (init/clone copy its hooks).
//     Consequence: subcommand options that share these letters (grep -c, diff -c, log -C,
//     add -u, status -uno, cherry-pick -x) are refused too; their long forms (--count,
//     --find-copies, --update, --untracked-files=no) are admitted.
//   - Configuration keys whose value is a command (core.sshCommand, core.pager,
//     core.editor, core.fsmonitor, core.hooksPath, ...; alias.*, include.*, includeIf.*,
//     three-part keys such as diff.<driver>.command, filter.<driver>.clean,
//     remote.<name>.uploadpack), as an atom or "key=value": e.g. `git config alias.x '!sh'`.
//     (An argument file named like "alias.go" must then be written "./alias.go".)
//   - Aliases: the first non-option atom (the subcommand) must be a git builtin that runs
//     no external program of the caller's choosing; anything else may be an alias or a
//     git-* program found on PATH.
//
// A short-option cluster ("-qu") is not scanned: git's value-taking letters differ per
// subcommand. What -u would reach (an upload-pack command) needs a transport, which
// GitPinnedConfig disables.
var gitRunner = codeRunner{
	names: []string{"git"},
	inlineFlags: []string{
		"-c", "--config-env", "--exec-path", "-C", "--git-dir", "--work-tree",
		"--upload-pack", "-u", "--receive-pack", "--exec", "-x", "--extcmd", "--template",
	},
	configKeys: []string{
		"core.sshcommand", "core.pager", "core.editor", "core.fsmonitor", "core.hookspath",
		"core.askpass", "core.gitproxy", "core.worktree", "core.alternaterefscommand",
		"sequence.editor", "diff.external", "credential.helper", "gpg.program",
		"gpg.ssh.program", "gpg.x509.program", "gpg.openpgp.program", "uploadpack.packobjectshook",
		"remote.origin.uploadpack", "remote.origin.receivepack",
		"safe.bareRepository", "safe.directory",
	},
	configSections: []string{"alias.", "include.", "includeif."},
	anyPosition:    true,
	subcommands:    gitBuiltins,
}

// gitBuiltins are git's builtin subcommands (git --list-cmds=builtins, plus builtins of
// newer releases) minus those that run a program named by their arguments or by
// configuration the caller could have written: hook (runs hooks), difftool, for-each-repo,
// remote-ext/remote-fd, credential*, the *--helper/--daemon/--worker internals, and the
// server-side upload-pack, receive-pack and upload-archive.
var gitBuiltins = setOf(
	"add", "am", "annotate", "apply", "archive", "bisect", "blame", "branch", "bugreport", "bundle",
	"cat-file", "check-attr", "check-ignore", "check-mailmap", "check-ref-format", "checkout",
	"checkout-index", "cherry", "cherry-pick", "clean", "clone", "column", "commit", "commit-graph",
	"commit-tree", "config", "count-objects", "describe", "diagnose", "diff", "diff-files",
	"diff-index", "diff-tree", "fast-export", "fast-import", "fetch", "fetch-pack", "fmt-merge-msg",
	"for-each-ref", "format-patch", "fsck", "fsck-objects", "gc", "get-tar-commit-id", "grep",
	"hash-object", "help", "index-pack", "init", "init-db", "interpret-trailers", "log", "ls-files",
	"ls-remote", "ls-tree", "mailinfo", "mailsplit", "maintenance", "merge", "merge-base",
	"merge-file", "merge-index", "merge-ours", "merge-recursive", "merge-recursive-ours",
	"merge-recursive-theirs", "merge-subtree", "merge-tree", "mktag", "mktree", "multi-pack-index",
	"mv", "name-rev", "notes", "pack-objects", "pack-redundant", "pack-refs", "patch-id", "pickaxe",
	"prune", "prune-packed", "pull", "push", "range-diff", "read-tree", "rebase", "reflog", "refs",
	"remote", "repack", "replace", "replay", "rerere", "reset", "restore", "rev-list", "rev-parse",
	"revert", "rm", "send-pack", "shortlog", "show", "show-branch", "show-index", "show-ref",
	"sparse-checkout", "stage", "stash", "status", "stripspace", "submodule", "switch",
	"symbolic-ref", "tag", "unpack-file", "unpack-objects", "update-index", "update-ref",
	"update-server-info", "var", "verify-commit", "verify-pack", "verify-tag", "version",
	"whatchanged", "worktree", "write-tree",
)

// atomIsConfigKey reports whether a (normalized) atom is, or assigns, a configuration key
// whose value is a command.
func (cr codeRunner) atomIsConfigKey(a string) bool {
	if len(cr.configKeys) == 0 && len(cr.configSections) == 0 {
		return false
	}
	key, _, _ := strings.Cut(strings.ToLower(a), "=")
	for _, k := range cr.configKeys {
		if key == strings.ToLower(k) {
			return true
		}
	}
	for _, s := range cr.configSections {
		if strings.HasPrefix(key, s) {
			return true
		}
	}
	// Three-part keys whose value is a command: diff.<driver>.command/textconv,
	// merge.<driver>.driver, filter.<driver>.clean/smudge/process,
	// remote.<name>.uploadpack/receivepack/vcs, submodule.<name>.update,
	// credential.<url>.helper. (A file name such as "a.update" has one dot.)
	if strings.Count(key, ".") < 2 || strings.Contains(key, "/") {
		return false
	}
	for _, suffix := range []string{".command", ".textconv", ".driver", ".clean", ".smudge", ".process", ".uploadpack", ".receivepack", ".vcs", ".update", ".helper", ".sshcommand", ".proxy"} {
		if strings.HasSuffix(key, suffix) {
			return true
		}
	}
	return false
}

// prefixCanAdmitConfigKey reports whether an atom beginning with prefix could be such a key.
func (cr codeRunner) prefixCanAdmitConfigKey(p string) bool {
	if len(cr.configKeys) == 0 && len(cr.configSections) == 0 {
		return false
	}
	lp := strings.ToLower(p)
	if cr.atomIsConfigKey(lp) {
		return true
	}
	for _, k := range append(append([]string{}, cr.configKeys...), cr.configSections...) {
		if strings.HasPrefix(strings.ToLower(k), lp) {
			return true
		}
	}
	// A prefix that names a section and subsection ("diff.x.") could grow a command-valued
	// variable.
	return strings.Count(lp, ".") >= 2 && !strings.HasPrefix(lp, "-") && !strings.Contains(lp, "/") && !strings.Contains(lp, "=") && strings.HasSuffix(lp, ".")
}

// checkConcreteArgv applies the any-position rules of a code runner to a concrete argv
// (argv[0] is the executable): every atom is checked as an inline-code atom, and the
// subcommand must be admitted. Nil for other executables.
func checkConcreteArgv(code Code, exe string, argv []string) *Refusal {
	cr, ok := codeRunnerFor(exe)
	if !ok || !cr.anyPosition {
		return nil
	}
	base := path.Base(exe)
	sub := -1
	for i := 1; i < len(argv); i++ {
		if cr.atomIsInline(argv[i]) {
			return Refuse(code, fieldIndex("spec.argv", i), "must not pass inline code to %s (%q runs or selects a command)", base, truncateForMessage(argv[i]))
		}
		if sub < 0 && !strings.HasPrefix(argv[i], "-") {
			sub = i
		}
	}
	if cr.subcommands != nil && sub > 0 {
		if _, ok := cr.subcommands[argv[sub]]; !ok {
			return Refuse(code, fieldIndex("spec.argv", sub), "must be a %s builtin subcommand (%q may be an alias or an external program)", base, truncateForMessage(argv[sub]))
		}
	}
	return nil
}

// IsGit reports whether exe (a path, declared or symlink-resolved) classifies as git.
func IsGit(exe string) bool {
	cr, ok := codeRunnerFor(exe)
	return ok && len(cr.names) > 0 && cr.names[0] == "git"
}

// GitEmptyHooksDir is what GitPinnedConfig names as core.hooksPath: /dev/null, host-owned,
// read-only and present in every sandbox, can hold no hook (git finds none below it), so
// no repository configuration or planted directory decides which hooks run.
const GitEmptyHooksDir = "/dev/null"

// GitPinnedConfig is the configuration the node fixes for every git it starts, through
// git's own environment mechanism (GIT_CONFIG_COUNT, GIT_CONFIG_KEY_n,
// GIT_CONFIG_VALUE_n), which takes precedence over system, global and repository
// configuration: an implicitly discovered bare repository is refused, hooks come from an
// empty directory, no fsmonitor command runs, and no transport (whose commands
// --upload-pack, core.sshCommand or ext:: would name) is allowed.
func GitPinnedConfig(hooksDir string) []EnvVar {
	kv := [][2]string{
		{"safe.bareRepository", "explicit"},
		{"core.hooksPath", hooksDir},
		{"core.fsmonitor", "false"},
		{"protocol.allow", "never"},
		{"protocol.file.allow", "never"},
		{"protocol.ext.allow", "never"},
		{"protocol.git.allow", "never"},
		{"protocol.ssh.allow", "never"},
		{"protocol.http.allow", "never"},
		{"protocol.https.allow", "never"},
		{"core.sshCommand", "false"},
		{"core.pager", "cat"},
		{"core.editor", "false"},
		{"diff.external", ""},
	}
	out := make([]EnvVar, 0, 2*len(kv)+1)
	out = append(out, EnvVar{Name: "GIT_CONFIG_COUNT", Value: itoa(len(kv))})
	for i, e := range kv {
		out = append(out, EnvVar{Name: "GIT_CONFIG_KEY_" + itoa(i), Value: e[0]}, EnvVar{Name: "GIT_CONFIG_VALUE_" + itoa(i), Value: e[1]})
	}
	return out
}

// WithGitPinnedConfig returns env (a curated environment) with GitPinnedConfig in force:
// any GIT_CONFIG_* entry of env is dropped first (the profile cannot set them: they are
// forbidden keys; this is the node's own guarantee), the result sorted by key.
func WithGitPinnedConfig(env []EnvVar, hooksDir string) []EnvVar {
	out := make([]EnvVar, 0, len(env)+32)
	for _, v := range env {
		if k := strings.ToUpper(v.Name); strings.HasPrefix(k, "GIT_CONFIG_") && k != "GIT_CONFIG_NOSYSTEM" {
			continue
		}
		if strings.ToUpper(v.Name) == "GIT_CONFIG_PARAMETERS" {
			continue
		}
		out = append(out, v)
	}
	out = append(out, GitPinnedConfig(hooksDir)...)
	sortEnv(out)
	return out
}

func sortEnv(env []EnvVar) {
	slices.SortStableFunc(env, func(a, b EnvVar) int { return strings.Compare(a.Name, b.Name) })
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for ; i > 0; i /= 10 {
		n--
		b[n] = byte('0' + i%10)
	}
	return string(b[n:])
}

// CheckResolvedExecutable is the node's classification of the program it is about to
// start: resolved is the symlink-resolved path of argv[0] on the node. The declared
// executable was checked at admission; a link may name another program ("/usr/bin/js" ->
// "nodejs", "/usr/local/bin/vcs" -> "git"), so the same rules run again under the
// resolved name: a launcher is refused, the profile's fixed atoms and prefixes must not
// admit the resolved program's inline code, and neither may the concrete argv (which also
// covers what a remembered grant admitted). All refusals are shell-string.
func CheckResolvedExecutable(p Profile, resolved string, argv []string) *Refusal {
	if resolved == "" || resolved == p.Executable {
		return checkConcreteArgv(CodeShellString, p.Executable, argv)
	}
	if isLauncher(resolved) {
		return Refuse(CodeShellString, "spec.executable", "must not be a shell or command launcher (%s resolves to %s)", truncateForMessage(p.Executable), truncateForMessage(resolved))
	}
	if r := checkInlineCode(CodeShellString, resolved, p.FixedArgs, "spec.fixedArgs", 0, p.AllowedArgPrefixes, "spec.allowedArgPrefixes"); r != nil {
		r.Message += " (" + truncateForMessage(p.Executable) + " resolves to " + truncateForMessage(resolved) + ")"
		return r
	}
	if cr, ok := codeRunnerFor(resolved); ok {
		for i := 1; i < len(argv); i++ {
			if cr.atomIsInline(argv[i]) {
				return Refuse(CodeShellString, fieldIndex("spec.argv", i), "must not pass inline code to %s (%q; %s resolves to it)", path.Base(resolved), truncateForMessage(argv[i]), truncateForMessage(p.Executable))
			}
		}
	}
	return checkConcreteArgv(CodeShellString, resolved, argv)
}

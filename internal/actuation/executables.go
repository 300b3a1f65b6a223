package actuation

import (
	"path"
	"slices"
	"strings"
)

// This file holds the executable classification tables behind the
// "argv is data, never a shell string" rule (DESIGN §5, decision 25, and the
// adversarial matrix row "reject shell strings, argv injection through profile
// escape"). The rules are data; the code below only interprets them.
//
// An executable is classified by its base name, lower-cased, with a trailing
// ".exe" and a trailing version suffix (digits, '.', '-', '_') removed, and
// by the stem before its first '.', so "/usr/bin/python3.12", "/bin/bash5",
// "/opt/node18" and "/bin/sh.distrib" classify as python, bash, node and sh. The node agent must classify the symlink-resolved binary too
// (CheckExecutable on the resolved path), since /bin/sh may be a link to
// busybox.

// launcherNames are shells and command launchers. A profile whose executable
// is one of them is refused outright with shell-string: whatever argv they
// receive, they run another program or a command string, so no argv prefix
// could bound them.
//
//   - POSIX and other shells: sh, bash, rbash, dash, zsh, ksh, ksh93, mksh,
//     pdksh, oksh, ash, yash, posh, fish, csh, tcsh, rc, es, elvish, nu,
//     xonsh, osh, ysh, cmd.
//   - multi-call binaries: busybox, toybox.
//   - launchers that run their argv as a command: env, xargs, nohup, setsid,
//     script, eval, exec, command, builtin, nice, ionice, timeout, time,
//     stdbuf, taskset, chrt, flock, watch, parallel, run-parts,
//     start-stop-daemon, systemd-run, at, batch, npx, pnpx, bunx.
//   - identity and namespace switchers: sudo, sudoedit, su, doas, pkexec,
//     runuser, setpriv, capsh, sg, newgrp, chroot, unshare, nsenter, firejail,
//     bwrap, proot, fakeroot, fakechroot.
//   - remote shells and terminal multiplexers: ssh, rsh, rlogin, screen, tmux.
//   - tracers and debuggers that start programs: strace, ltrace, gdb,
//     valgrind.
var launcherNames = setOf(
	"sh", "bash", "rbash", "dash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "oksh", "ash", "yash", "posh",
	"fish", "csh", "tcsh", "rc", "es", "elvish", "nu", "xonsh", "osh", "ysh", "cmd",
	"busybox", "toybox",
	"env", "xargs", "nohup", "setsid", "script", "eval", "exec", "command", "builtin", "nice", "ionice",
	"timeout", "time", "stdbuf", "taskset", "chrt", "flock", "watch", "parallel", "run-parts",
	"start-stop-daemon", "systemd-run", "at", "batch", "npx", "pnpx", "bunx",
	"sudo", "sudoedit", "su", "doas", "pkexec", "runuser", "setpriv", "capsh", "sg", "newgrp",
	"chroot", "unshare", "nsenter", "firejail", "bwrap", "proot", "fakeroot", "fakechroot",
	"ssh", "rsh", "rlogin", "screen", "tmux",
	"strace", "ltrace", "gdb", "valgrind",
)

// codeRunner describes an interpreter (or a tool with a command-execution
// flag) that is admissible only while no inline code can reach it: such a
// profile is refused with shell-string when its fixed arguments contain an
// inline-code flag, or when one of its allowed argument prefixes could admit
// one (the prefix is a prefix of the flag, the flag is a prefix of the
// prefix, or the prefix opens a short-option cluster that could still grow
// the flag's letter).
type codeRunner struct {
	// names are exact normalized base names; families are name prefixes
	// (only for distinctive families such as "python").
	names    []string
	families []string
	// inlineFlags are whole atoms that carry or introduce inline code; a long
	// form also matches "flag=value".
	inlineFlags []string
	// shortInline are letters that are inline-code options inside a
	// getopt-style short-option cluster ("-le" for perl, "-Bc" for python).
	shortInline string
	// shortArg are letters that take the rest of the cluster as their value,
	// so scanning a cluster stops there ("-W" for python).
	shortArg string
	// foldCase and abbreviate model PowerShell: parameters are
	// case-insensitive and may be abbreviated to any prefix.
	foldCase, abbreviate bool
	// programFile is set for tools whose program is their first operand
	// (awk, sed): the profile must fix the program with one of these flags in
	// fixedArgs, or the first variable atom would become the program.
	programFile []string
	// configKeys are git-style configuration keys (lower case) whose value is a
	// command; an atom that is the key, or "key=value", is inline code.
	// configSections are key prefixes ("alias.") with the same meaning.
	configKeys, configSections []string
	// anyPosition: every atom of a concrete argv is checked (AdmitSubject), not only the
	// profile's fixed atoms and prefixes, since the tool reads these options anywhere.
	anyPosition bool
	// subcommands, when set, are the only atoms admitted as the first non-option atom of
	// a concrete argv (git: a builtin; anything else may be an alias or an external
	// git-* program).
	subcommands map[string]struct{}
}

// codeRunners: interpreters with inline-code flags, and ordinary tools whose
// flags run a command.
var codeRunners = []codeRunner{
	{families: []string{"python", "pypy"}, inlineFlags: []string{"-c"}, shortInline: "c", shortArg: "WXQm"},
	{names: []string{"perl"}, inlineFlags: []string{"-e", "-E", "-M", "-m"}, shortInline: "eEMm", shortArg: "Iix"},
	{names: []string{"ruby", "jruby", "truffleruby"}, inlineFlags: []string{"-e"}, shortInline: "e", shortArg: "CEFIKTWirx"},
	{names: []string{"node", "nodejs"}, inlineFlags: []string{"-e", "--eval", "-p", "--print", "--import", "--loader", "--experimental-loader"}, shortInline: "ep"},
	{names: []string{"bun"}, inlineFlags: []string{"-e", "--eval", "-p", "--print"}, shortInline: "ep"},
	{names: []string{"deno"}, inlineFlags: []string{"eval", "repl"}},
	{names: []string{"php", "php-cgi"}, inlineFlags: []string{"-r", "-B", "-R", "-E", "-a"}, shortInline: "rBREa", shortArg: "cdfztF"},
	{families: []string{"lua"}, inlineFlags: []string{"-e"}, shortInline: "e", shortArg: "l"},
	{names: []string{"tclsh", "wish"}}, // no inline-code flag: the program is a file or stdin
	{names: []string{"expect"}, inlineFlags: []string{"-c"}, shortInline: "c", shortArg: "f"},
	{names: []string{"r", "rscript"}, inlineFlags: []string{"-e", "--expr"}, shortInline: "e"},
	{names: []string{"pwsh", "powershell", "pwsh-preview"}, inlineFlags: []string{"-command", "-c", "-encodedcommand", "-e", "-ec", "-commandwithargs", "-cwa"}, foldCase: true, abbreviate: true},
	{names: []string{"osascript"}, inlineFlags: []string{"-e"}, shortInline: "e"},
	{names: []string{"julia"}, inlineFlags: []string{"-e", "--eval", "-E", "--print"}, shortInline: "eE", shortArg: "LJOtp"},
	{names: []string{"guile"}, inlineFlags: []string{"-c", "-e"}, shortInline: "ce"},
	{names: []string{"racket"}, inlineFlags: []string{"-e", "--eval"}, shortInline: "e"},
	{names: []string{"sbcl", "clisp", "ecl"}, inlineFlags: []string{"--eval", "-x", "-eval"}},
	{names: []string{"elixir", "iex"}, inlineFlags: []string{"-e", "--eval"}, shortInline: "e"},
	{names: []string{"erl"}, inlineFlags: []string{"-eval", "-s", "-run"}},
	{names: []string{"groovy", "jrunscript", "scala", "ghc", "kotlin"}, inlineFlags: []string{"-e"}, shortInline: "e"},
	{names: []string{"vim", "vi", "nvim", "ex", "view", "rvim"}, inlineFlags: []string{"-c", "--cmd", "-S", "+"}, shortInline: "cS"},
	{names: []string{"emacs"}, inlineFlags: []string{"--eval", "-eval", "-l", "--load", "-f", "--funcall"}},
	{names: []string{"find"}, inlineFlags: []string{"-exec", "-execdir", "-ok", "-okdir"}},
	{names: []string{"tar", "gtar", "bsdtar"}, inlineFlags: []string{"--to-command", "--use-compress-program", "-I", "--checkpoint-action", "--info-script", "-F", "--new-volume-script", "--rsh-command"}, shortInline: "IF", shortArg: "fCbgKLNTVX"},
	{names: []string{"rsync"}, inlineFlags: []string{"-e", "--rsh", "--rsync-path"}, shortInline: "e"},
	{names: []string{"zip"}, inlineFlags: []string{"-TT", "--unzip-command"}},
	{names: []string{"awk", "gawk", "mawk", "nawk"}, inlineFlags: []string{"-e", "--source"}, shortInline: "e", shortArg: "vfFEilW", programFile: []string{"-f", "--file", "-E", "--exec"}},
	{names: []string{"sed", "gsed"}, inlineFlags: []string{"-e", "--expression"}, shortInline: "e", shortArg: "fil", programFile: []string{"-f", "--file"}},
	gitRunner,
}

// executableNames returns the names an executable path is classified by:
// the lower-cased base name without ".exe" and without a trailing version
// suffix, and the same for the stem before the first '.' ("sh.distrib",
// "bash.static").
func executableNames(exe string) []string {
	base := strings.TrimSuffix(strings.ToLower(path.Base(exe)), ".exe")
	names := []string{base, trimVersion(base)}
	if stem, _, found := strings.Cut(base, "."); found && stem != "" {
		names = append(names, stem, trimVersion(stem))
	}
	return names
}

// trimVersion removes a trailing version suffix: "python3.12" -> "python".
func trimVersion(name string) string {
	if trimmed := strings.TrimRight(name, "0123456789.-_"); trimmed != "" {
		return trimmed
	}
	return name
}

// isLauncher reports whether exe is a shell or command launcher.
func isLauncher(exe string) bool {
	for _, n := range executableNames(exe) {
		if _, ok := launcherNames[n]; ok {
			return true
		}
	}
	return false
}

// codeRunnerFor returns the table entry for exe, if any.
func codeRunnerFor(exe string) (codeRunner, bool) {
	names := executableNames(exe)
	for _, cr := range codeRunners {
		for _, name := range names {
			if slices.Contains(cr.names, name) {
				return cr, true
			}
			for _, f := range cr.families {
				if strings.HasPrefix(name, f) {
					return cr, true
				}
			}
		}
	}
	return codeRunner{}, false
}

// normalizeAtom applies the runner's case folding and PowerShell's alternate
// parameter introducers ("--x" and "/x" read as "-x").
func (cr codeRunner) normalizeAtom(a string) string {
	if cr.foldCase {
		a = strings.ToLower(a)
	}
	if cr.abbreviate {
		switch {
		case strings.HasPrefix(a, "--"):
			a = a[1:]
		case strings.HasPrefix(a, "/"):
			a = "-" + a[1:]
		}
	}
	return a
}

// atomIsInline reports whether one concrete fixed atom is an inline-code flag:
// the flag itself, the flag with an attached value ("-cCODE", "--eval=CODE",
// PowerShell "-Command:CODE"), an abbreviation of a long flag (getopt_long
// and PowerShell accept unambiguous prefixes), or a short-option cluster that
// contains an inline letter ("-le").
func (cr codeRunner) atomIsInline(atom string) bool {
	a := cr.normalizeAtom(atom)
	name := a
	if strings.HasPrefix(a, "-") {
		if i := strings.IndexByte(a, '='); i > 0 {
			name = a[:i]
		}
		if i := strings.IndexByte(name, ':'); i > 0 && cr.abbreviate {
			name = name[:i]
		}
	}
	for _, f := range cr.inlineFlags {
		switch {
		case a == f || name == f:
			return true
		case f == "+" && strings.HasPrefix(a, "+"): // vim "+cmd"
			return true
		case cr.abbreviate && len(name) >= 2 && strings.HasPrefix(f, name):
			return true
		case strings.HasPrefix(f, "--") && len(name) > 2 && strings.HasPrefix(name, "--") && strings.HasPrefix(f, name):
			return true
		case !cr.abbreviate && isShortFlag(f) && strings.HasPrefix(a, f):
			return true
		}
	}
	if cr.atomIsConfigKey(a) {
		return true
	}
	return cr.clusterHitsInline(a, false)
}

// isShortFlag reports whether f is a one-letter option such as "-c".
func isShortFlag(f string) bool { return len(f) == 2 && f[0] == '-' && f[1] != '-' }

// clusterHitsInline scans a short-option cluster ("-abc"). With open=true the
// atom is only a prefix, so a cluster that ends without reaching a
// value-taking letter could still grow an inline letter.
func (cr codeRunner) clusterHitsInline(a string, open bool) bool {
	if cr.shortInline == "" || len(a) < 1 || a[0] != '-' || strings.HasPrefix(a, "--") {
		return false
	}
	for i := 1; i < len(a); i++ {
		c := a[i]
		if strings.IndexByte(cr.shortInline, c) >= 0 {
			return true
		}
		if strings.IndexByte(cr.shortArg, c) >= 0 {
			return false
		}
	}
	return open
}

// prefixCanAdmitInline reports whether some atom beginning with prefix could
// be an inline-code flag: the prefix is a prefix of a flag (the atom may be
// the flag or, for long flags, an abbreviation of it), or the flag is a
// prefix of the prefix and what follows is the flag's value, or the prefix
// opens a short-option cluster that could still grow an inline letter.
func (cr codeRunner) prefixCanAdmitInline(prefix string) bool {
	p := cr.normalizeAtom(prefix)
	for _, f := range cr.inlineFlags {
		if strings.HasPrefix(f, p) {
			return true
		}
		if !strings.HasPrefix(p, f) {
			continue
		}
		rest := p[len(f):]
		switch {
		case rest == "":
			return true
		case strings.HasPrefix(rest, "="):
			return true
		case cr.abbreviate && strings.HasPrefix(rest, ":"):
			return true
		case f == "+":
			return true
		case !cr.abbreviate && isShortFlag(f):
			return true // attached value: "-cCODE"
		}
	}
	if cr.prefixCanAdmitConfigKey(p) {
		return true
	}
	return cr.clusterHitsInline(p, true)
}

// hasProgramFile reports whether fixed atoms name a program file.
func (cr codeRunner) hasProgramFile(fixed []string) bool {
	for _, a := range fixed {
		for _, f := range cr.programFile {
			if a == f || (strings.HasPrefix(f, "--") && strings.HasPrefix(a, f+"=")) ||
				(!strings.HasPrefix(f, "--") && len(f) == 2 && strings.HasPrefix(a, f) && !strings.HasPrefix(a, "--")) {
				return true
			}
		}
	}
	return false
}

// CheckExecutable checks one executable path: absolute, clean, no NUL or
// control characters, valid UTF-8, at most MaxPathBytes
// (executable-not-absolute), and not a shell or command launcher
// (shell-string). The node agent calls it again on the symlink-resolved path.
func CheckExecutable(exe string) *Refusal {
	const field = "spec.executable"
	if exe == "" || exe[0] != '/' || exe == "/" || len(exe) > MaxPathBytes || path.Clean(exe) != exe || strings.HasSuffix(exe, "/") {
		return Refuse(CodeExecutableNotAbsolute, field, "must be an absolute, clean path to a program (got %q)", truncateForMessage(exe))
	}
	if r := checkPathCharacters(exe, field); r != nil {
		return Refuse(CodeExecutableNotAbsolute, field, "must be an absolute, clean path to a program: %s", r.Message)
	}
	if isLauncher(exe) {
		return Refuse(CodeShellString, field, "must not be a shell or command launcher (%s)", path.Base(exe))
	}
	return nil
}

// checkInlineCode applies the inline-code rule to an executable with fixed
// atoms and variable prefixes. fixedField and prefixField name the lists in
// refusals; code is shell-string for profiles and consent-prefix-too-broad
// for consent entries.
func checkInlineCode(code Code, exe string, fixed []string, fixedField string, fixedOffset int, prefixes []string, prefixField string) *Refusal {
	cr, ok := codeRunnerFor(exe)
	if !ok {
		return nil
	}
	base := path.Base(exe)
	for i, a := range fixed {
		if cr.atomIsInline(a) {
			return Refuse(code, fieldIndex(fixedField, i+fixedOffset), "must not pass inline code to %s (%q is an inline-code flag)", base, truncateForMessage(a))
		}
	}
	for i, p := range prefixes {
		if cr.prefixCanAdmitInline(p) {
			return Refuse(code, fieldIndex(prefixField, i), "must not admit an inline-code flag of %s (prefix %q could)", base, truncateForMessage(p))
		}
	}
	if len(cr.programFile) > 0 && !cr.hasProgramFile(fixed) {
		return Refuse(code, fixedField, "must fix the program of %s with %s, or a variable atom becomes the program", base, strings.Join(cr.programFile, " or "))
	}
	return nil
}

func setOf(values ...string) map[string]struct{} {
	m := make(map[string]struct{}, len(values))
	for _, v := range values {
		m[v] = struct{}{}
	}
	return m
}

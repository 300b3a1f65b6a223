package actuation

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// goTestProfile is a typical profile: go test over allowlisted paths.
func goTestProfile() Profile {
	return Profile{
		Executable:         "/usr/bin/go",
		FixedArgs:          []string{"test"},
		AllowedArgPrefixes: []string{"./", "-run=", "-v"},
		AllowedRoots:       []string{"repo"},
		CwdPolicy:          CwdBeneathRoot,
		Env: EnvPolicy{
			Mode:             EnvModeAllowlistedOverrides,
			Defaults:         []EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "HOME", Value: "/tmp/home"}},
			AllowedOverrides: []string{"GOFLAGS"},
		},
		Egress:            EgressDeny,
		Credentials:       CredentialsDenied,
		MaxTimeoutSeconds: 600,
		MaxOutputBytes:    1 << 20,
		PTY:               PTYDisabled,
	}
}

func codes(rs []*Refusal) []Code {
	out := []Code{}
	for _, r := range rs {
		out = append(out, r.Code)
	}
	return out
}

func TestValidateProfileCollectsEveryRefusalInFieldOrder(t *testing.T) {
	p := goTestProfile()
	p.Executable = "bin/go"
	p.AllowedRoots = nil
	p.Egress = "Allow"
	p.MaxOutputBytes = MaxOutputBytesCap + 1
	p.PTY = ""
	got := codes(ValidateProfile(p))
	want := []Code{CodeExecutableNotAbsolute, CodeProfileRootsEmpty, CodeEgressForbidden, CodeOutputCapAboveMax, CodeProfileInvalid}
	if !slices.Equal(got, want) {
		t.Fatalf("codes = %v, want %v", got, want)
	}
	rs := ValidateProfile(p)
	if rs[0].Field != "spec.executable" || rs[1].Field != "spec.allowedRoots" || rs[4].Field != "spec.pty" {
		t.Errorf("fields = %q %q %q", rs[0].Field, rs[1].Field, rs[4].Field)
	}
	if len(ValidateProfile(goTestProfile())) != 0 {
		t.Fatalf("typical profile refused: %v", ValidateProfile(goTestProfile()))
	}
}

func TestEveryLauncherIsRefused(t *testing.T) {
	for name := range launcherNames {
		for _, exe := range []string{"/usr/bin/" + name, "/opt/tools/" + strings.ToUpper(name), "/usr/bin/" + name + "5.2"} {
			if r := CheckExecutable(exe); r == nil || r.Code != CodeShellString {
				t.Errorf("CheckExecutable(%q) = %v, want shell-string", exe, r)
			}
		}
	}
	for _, exe := range []string{"/bin/sh.distrib", "/bin/bash.static", "/usr/bin/BusyBox", "/usr/bin/env.exe"} {
		if r := CheckExecutable(exe); r == nil || r.Code != CodeShellString {
			t.Errorf("CheckExecutable(%q) = %v, want shell-string", exe, r)
		}
	}
	for _, exe := range []string{"/usr/bin/go", "/usr/bin/make", "/usr/bin/git", "/usr/bin/cargo", "/usr/bin/shasum", "/usr/bin/envsubst", "/usr/bin/bashbug2"} {
		if r := CheckExecutable(exe); r != nil {
			t.Errorf("CheckExecutable(%q) = %v, want nil", exe, r)
		}
	}
}

func TestCheckExecutableShape(t *testing.T) {
	for _, exe := range []string{"", "go", "./go", "/", "/usr/bin/", "/usr//bin/go", "/usr/bin/./go", "/usr/bin/../go", "/usr/bin/go\x00", "/usr/bin/g\no"} {
		if r := CheckExecutable(exe); r == nil || r.Code != CodeExecutableNotAbsolute {
			t.Errorf("CheckExecutable(%q) = %v, want executable-not-absolute", exe, r)
		}
	}
}

// Every inline flag of every code runner is refused as a fixed argument and
// as an allowed prefix.
func TestEveryInlineFlagIsRefused(t *testing.T) {
	for _, cr := range codeRunners {
		names := append(slices.Clone(cr.names), cr.families...)
		for _, n := range names {
			exe := "/usr/bin/" + n
			for _, flag := range cr.inlineFlags {
				fixed := []string{flag, "x"}
				if len(cr.programFile) > 0 {
					fixed = append([]string{cr.programFile[0], "prog"}, fixed...)
				}
				if r := checkInlineCode(CodeShellString, exe, fixed, "f", 0, nil, "p"); r == nil {
					t.Errorf("%s with fixed %q admitted", exe, flag)
				}
				base := []string{}
				if len(cr.programFile) > 0 {
					base = []string{cr.programFile[0], "prog"}
				}
				if r := checkInlineCode(CodeShellString, exe, base, "f", 0, []string{flag}, "p"); r == nil {
					t.Errorf("%s with prefix %q admitted", exe, flag)
				}
			}
		}
	}
}

func TestInlineCodeRule(t *testing.T) {
	cases := []struct {
		exe      string
		fixed    []string
		prefixes []string
		refused  bool
	}{
		{"/usr/bin/python3", []string{"-c", "print(1)"}, nil, true},
		{"/usr/bin/python3", []string{"-Bc", "print(1)"}, nil, true},
		{"/usr/bin/python3", []string{"-cprint(1)"}, nil, true},
		{"/usr/bin/python3", []string{"-Wignore::DeprecationWarning", "x.py"}, nil, false},
		{"/usr/bin/python3", []string{"-m", "pytest"}, []string{"tests/", "-k", "--maxfail="}, true}, // "-k" opens a cluster: -kc
		{"/usr/bin/python3", []string{"-m", "pytest"}, []string{"tests/", "--maxfail="}, false},
		{"/usr/bin/python3", nil, []string{"-W"}, false},
		{"/usr/bin/python3", nil, []string{"-X"}, false},
		{"/usr/bin/python3", nil, []string{"-"}, true},
		{"/usr/bin/python3.12-dbg", nil, []string{"-c"}, true},
		{"/usr/bin/pypy3", []string{"-c", "1"}, nil, true},
		{"/usr/bin/perl", []string{"-le", "print 1"}, nil, true},
		{"/usr/bin/perl", []string{"-pi.bak", "-e", "s/a/b/"}, nil, true},
		{"/usr/bin/perl", []string{"-pie", "x"}, nil, false}, // -i consumes "e" as the backup suffix
		{"/usr/bin/perl", []string{"script.pl"}, []string{"data/"}, false},
		{"/usr/bin/ruby", []string{"-rjson", "x.rb"}, nil, false},
		{"/usr/bin/ruby", []string{"-ne", "puts"}, nil, true},
		{"/usr/bin/node", []string{"--eval", "1"}, nil, true},
		{"/usr/bin/node", []string{"-pe", "1"}, nil, true},
		{"/usr/bin/node", []string{"server.js"}, []string{"--port="}, false},
		{"/usr/bin/node", []string{"server.js"}, []string{"--"}, true},
		{"/usr/bin/node", []string{"--ev", "1"}, nil, true},
		{"/usr/bin/deno", []string{"run", "main.ts"}, []string{"e"}, true},
		{"/usr/bin/deno", []string{"run", "main.ts"}, []string{"src/"}, false},
		{"/usr/bin/php8.2", []string{"-r", "phpinfo();"}, nil, true},
		{"/usr/bin/pwsh", []string{"-COMMAND", "x"}, nil, true},
		{"/usr/bin/pwsh", []string{"--command", "x"}, nil, true},
		{"/usr/bin/pwsh", []string{"/c", "x"}, nil, true},
		{"/usr/bin/pwsh", []string{"-Command:x"}, nil, true},
		{"/usr/bin/pwsh", []string{"-NoProfile", "-File", "b.ps1"}, nil, false},
		{"/usr/bin/pwsh", []string{"-File", "b.ps1"}, []string{"-ExecutionPolicy"}, false},
		{"/usr/bin/pwsh", []string{"-File", "b.ps1"}, []string{"-e"}, true},
		{"/usr/bin/lua5.4", []string{"-e", "os.execute('x')"}, nil, true},
		{"/usr/bin/tclsh", []string{"build.tcl"}, []string{"-"}, false},
		{"/usr/bin/Rscript", []string{"-e", "1"}, nil, true},
		{"/usr/bin/osascript", []string{"-e", "x"}, nil, true},
		{"/usr/bin/vim", []string{"+!sh"}, nil, true},
		{"/usr/bin/find", []string{"."}, []string{"-exe"}, true},
		{"/usr/bin/find", []string{"."}, []string{"-execdir"}, true},
		{"/usr/bin/find", []string{".", "-name"}, []string{"*.go"}, false},
		{"/usr/bin/tar", []string{"-xzf", "a.tgz"}, nil, false},
		{"/usr/bin/tar", []string{"-xIcmd", "a"}, nil, true},
		{"/usr/bin/tar", []string{"--to-command=sh", "-xf", "a"}, nil, true},
		{"/usr/bin/rsync", []string{"-avze", "x"}, nil, true},
		{"/usr/bin/awk", []string{"-F", ","}, []string{"data/"}, true},
		{"/usr/bin/awk", []string{"-F", ",", "--file=r.awk"}, []string{"data/"}, false},
		{"/usr/bin/gawk", []string{"-f", "r.awk", "--source", "x"}, nil, true},
		{"/bin/sed", []string{"-n", "1p"}, []string{"src/"}, true}, // program not fixed with -f
		{"/bin/sed", []string{"-n", "-f", "e.sed"}, []string{"src/"}, false},
		{"/bin/sed", []string{"-f", "e.sed"}, []string{"-n"}, true}, // "-ne" reachable
		{"/bin/sed", []string{"-ie", "-f", "x.sed"}, nil, false},    // -i consumes "e" as the suffix
		{"/usr/bin/go", []string{"run", "-c"}, []string{"-"}, false},
	}
	for _, c := range cases {
		r := checkInlineCode(CodeShellString, c.exe, c.fixed, "spec.fixedArgs", 0, c.prefixes, "spec.allowedArgPrefixes")
		if (r != nil) != c.refused {
			t.Errorf("%s fixed=%q prefixes=%q: refusal %v, want refused=%v", c.exe, c.fixed, c.prefixes, r, c.refused)
		}
		if r != nil && r.Code != CodeShellString {
			t.Errorf("code %s, want shell-string", r.Code)
		}
	}
}

func TestValidateArgvShapeFields(t *testing.T) {
	rs := ValidateArgvShape([]string{"/usr/bin/go", "ok", "bad\x00", "\xff"})
	if got := []string{rs[0].Field, rs[1].Field}; !slices.Equal(got, []string{"spec.argv[2]", "spec.argv[3]"}) {
		t.Errorf("fields = %v", got)
	}
	for _, a0 := range []string{"ls -la", "a|b", "a&", "$HOME/x", "`id`", "x>y", "(x)", "{x}", "*.go", "a?", "~/bin/x", "'x'", "\"x\"", "a\\b", "a\nb", "a\tb", "a;b", "x\u00a0y", "\x1b"} {
		rs := ValidateArgvShape([]string{a0})
		if len(rs) != 1 || rs[0].Code != CodeShellString {
			t.Errorf("argv[0]=%q: %v, want shell-string", a0, rs)
		}
	}
	if rs := ValidateArgvShape([]string{""}); len(rs) != 1 || rs[0].Code != CodeArgvInvalid {
		t.Errorf("empty argv[0]: %v", rs)
	}
	if rs := ValidateArgvShape([]string{"/usr/bin/echo", "a; rm -rf / | $(x)"}); len(rs) != 0 {
		t.Errorf("metacharacters in later atoms are data: %v", rs)
	}
}

func TestAdmitArgvByProfileNamesFailingIndex(t *testing.T) {
	p := goTestProfile()
	for _, c := range []struct {
		argv  []string
		field string
	}{
		{[]string{"/usr/bin/gcc"}, "spec.argv[0]"},
		{[]string{"/usr/bin/go"}, "spec.argv[1]"},
		{[]string{"/usr/bin/go", "vet"}, "spec.argv[1]"},
		{[]string{"/usr/bin/go", "test", "./a", "-v", "-exec"}, "spec.argv[4]"},
	} {
		r := AdmitArgvByProfile(p, c.argv)
		if r == nil || r.Code != CodeArgvNotAdmitted || r.Field != c.field {
			t.Errorf("%q: %v, want argv-not-admitted at %s", c.argv, r, c.field)
		}
	}
	// An invalid empty prefix never admits everything, even if a caller
	// skipped ValidateProfile.
	p.AllowedArgPrefixes = []string{""}
	if r := AdmitArgvByProfile(p, []string{"/usr/bin/go", "test", "anything"}); r == nil {
		t.Error("an empty prefix admitted an atom")
	}
}

func TestValidateIntentAgainstProfileFields(t *testing.T) {
	p := goTestProfile()
	in := CommandIntent{ProfileRef: "go-test", Argv: []string{"/usr/bin/go", "test"}, Cwd: CwdAddress{Root: "repo", Path: "a/../b"},
		Env: []EnvVar{{Name: "GOFLAGS", Value: "x"}, {Name: "GOPATH", Value: "/x"}}, TimeoutSeconds: 601, OutputBytes: 0}
	rs := ValidateIntentAgainstProfile(p, in)
	got := map[string]Code{}
	for _, r := range rs {
		got[r.Field] = r.Code
	}
	want := map[string]Code{
		"spec.cwd.path":       CodePathTraversal,
		"spec.env[1].name":    CodeEnvOverrideNotAllowed,
		"spec.timeoutSeconds": CodeTimeoutAboveMax,
		"spec.outputBytes":    CodeOutputCapInvalid,
	}
	for f, c := range want {
		if got[f] != c {
			t.Errorf("field %s: %q, want %q (all: %v)", f, got[f], c, rs)
		}
	}
	if len(rs) != len(want) {
		t.Errorf("got %d refusals, want %d: %v", len(rs), len(want), rs)
	}
	def := ApplyIntentDefaults(p, CommandIntent{ProfileRef: "go-test", Cwd: CwdAddress{Root: "repo"}})
	if def.TimeoutSeconds != 600 || def.OutputBytes != 1<<20 {
		t.Errorf("ApplyIntentDefaults = %+v", def)
	}
	if rs := ValidateIntentAgainstProfile(p, def); len(rs) != 0 {
		t.Errorf("defaulted intent refused: %v", rs)
	}
}

// fuzzProfiles are the profiles FuzzAdmitArgv admits argv against.
func fuzzProfiles() []Profile {
	a := goTestProfile()
	b := goTestProfile()
	b.Executable, b.FixedArgs, b.AllowedArgPrefixes = "/usr/bin/python3", []string{"tools/check.py"}, []string{"src/", "--fix"}
	c := goTestProfile()
	c.Executable, c.FixedArgs, c.AllowedArgPrefixes = "/usr/bin/make", nil, nil
	return []Profile{a, b, c}
}

func fuzzEntries() []ConsentEntry {
	cwd := CwdAddress{Root: "repo"}
	return []ConsentEntry{
		{Scope: ScopeRememberExactArgv, GrantRef: "g-exact", Argv: []string{"/usr/bin/python3", "tools/migrate.py"}, Cwd: cwd},
		{Scope: ScopeRememberArgvPrefix, GrantRef: "g-prefix", Prefix: []string{"/usr/bin/go", "vet"}, VariablePrefixes: []string{"./"}, Cwd: cwd},
		{Scope: ScopeAllowOnce, GrantRef: "g-once", Argv: []string{"/usr/bin/make", "clean"}, Cwd: cwd, CommandRef: "ns/cmd"},
		{Scope: ScopeDeny, GrantRef: "g-deny", Argv: []string{"/usr/bin/make", "deploy"}, Cwd: cwd},
	}
}

// FuzzAdmitArgv: an admitted argv always starts with executable + fixedArgs
// (or with an entry's shape) and every further atom has an allowed prefix;
// nothing ValidateArgvShape refuses is ever admitted.
func FuzzAdmitArgv(f *testing.F) {
	for _, v := range vectorsOfKind(f, "command-profile") {
		var in commandProfileInput
		if err := json.Unmarshal(v.Input, &in); err != nil {
			f.Fatal(err)
		}
		argv := in.Argv
		if in.Intent != nil {
			argv = in.Intent.Argv
		}
		if joined := strings.Join(argv, "\x1e"); len(argv) > 0 && len(argv) < 64 && len(joined) < 8192 {
			for i := range fuzzProfiles() {
				f.Add(uint8(i), joined)
			}
		}
	}
	f.Add(uint8(0), "/usr/bin/go\x1etest\x1e./...\x1e-v")
	f.Add(uint8(1), "/usr/bin/python3\x1etools/migrate.py")
	f.Add(uint8(2), "/usr/bin/make\x1eclean")
	f.Add(uint8(0), "/usr/bin/go\x1evet\x1e./x")
	f.Fuzz(func(t *testing.T, which uint8, joined string) {
		profiles := fuzzProfiles()
		p := profiles[int(which)%len(profiles)]
		var argv []string
		if joined != "" {
			argv = strings.Split(joined, "\x1e")
		}
		shapeOK := len(ValidateArgvShape(argv)) == 0
		r := AdmitArgvByProfile(p, argv)
		if r == nil {
			if !shapeOK {
				t.Fatalf("profile admitted %q, which ValidateArgvShape refuses", argv)
			}
			checkShape(t, argv, append([]string{p.Executable}, p.FixedArgs...), p.AllowedArgPrefixes)
		} else if !IsKnownCode(r.Code) {
			t.Fatalf("unknown code %q", r.Code)
		}
		entries := fuzzEntries()
		a := Admit(p, entries, CommandIntent{ProfileRef: "p", Argv: argv, Cwd: CwdAddress{Root: "repo"}}, "ns/cmd")
		if a.Admitted != (a.Refusal == nil) {
			t.Fatalf("admission %+v: admitted must be exactly refusal == nil", a)
		}
		if !a.Admitted {
			if !IsKnownCode(a.Refusal.Code) {
				t.Fatalf("unknown code %q", a.Refusal.Code)
			}
			return
		}
		if !shapeOK {
			t.Fatalf("Admit admitted %q, which ValidateArgvShape refuses", argv)
		}
		if (a.By == AdmittedByProfile) != (r == nil) {
			t.Fatalf("Admit by %q disagrees with AdmitArgvByProfile (%v)", a.By, r)
		}
		if a.By == AdmittedByProfile {
			return
		}
		i := slices.IndexFunc(entries, func(e ConsentEntry) bool { return e.GrantRef == a.By })
		if i < 0 {
			t.Fatalf("admitted by unknown grant %q", a.By)
		}
		e := entries[i]
		if argv[0] != p.Executable {
			t.Fatalf("entry %s admitted another executable %q", e.GrantRef, argv[0])
		}
		switch e.Scope {
		case ScopeRememberExactArgv, ScopeAllowOnce:
			if !slices.Equal(e.Argv, argv) {
				t.Fatalf("exact entry %s admitted %q", e.GrantRef, argv)
			}
		case ScopeRememberArgvPrefix:
			checkShape(t, argv, e.Prefix, e.VariablePrefixes)
		default:
			t.Fatalf("entry of scope %s admitted", e.Scope)
		}
	})
}

// checkShape asserts argv = fixed followed by atoms that each have one of
// prefixes, independently of the code under test.
func checkShape(t *testing.T, argv, fixed, prefixes []string) {
	t.Helper()
	if len(argv) < len(fixed) || !slices.Equal(argv[:len(fixed)], fixed) {
		t.Fatalf("admitted %q does not start with %q", argv, fixed)
	}
	for _, a := range argv[len(fixed):] {
		ok := false
		for _, p := range prefixes {
			if p != "" && strings.HasPrefix(a, p) {
				ok = true
			}
		}
		if !ok {
			t.Fatalf("admitted atom %q has none of the prefixes %q", a, prefixes)
		}
	}
}

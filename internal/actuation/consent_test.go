package actuation

import (
	"testing"
)

func pythonProfile() Profile {
	p := goTestProfile()
	p.Executable, p.FixedArgs, p.AllowedArgPrefixes = "/usr/bin/python3", []string{"tools/check.py"}, []string{"src/"}
	return p
}

func TestValidateConsentEntryFields(t *testing.T) {
	p := pythonProfile()
	cwd := CwdAddress{Root: "repo"}
	cases := []struct {
		e     ConsentEntry
		code  Code
		field string
	}{
		{ConsentEntry{Scope: "remember-executable-any-args", GrantRef: "g", Cwd: cwd}, CodeConsentScopeInvalid, "scope"},
		{ConsentEntry{Scope: ScopeRememberExactArgv, Cwd: cwd, Argv: []string{"/usr/bin/python3"}}, CodeConsentScopeInvalid, "grantRef"},
		{ConsentEntry{Scope: ScopeRememberExactArgv, GrantRef: "g", Cwd: cwd, Argv: []string{"/usr/bin/python3", "x"}, CommandRef: "ns/c"}, CodeConsentScopeInvalid, "commandRef"},
		{ConsentEntry{Scope: ScopeRememberExactArgv, GrantRef: "g", Cwd: cwd, Argv: []string{"/usr/bin/python3", "x"}, Prefix: []string{"/usr/bin/python3"}}, CodeConsentScopeInvalid, "prefix"},
		{ConsentEntry{Scope: ScopeRememberExactArgv, GrantRef: "g", Cwd: cwd}, CodeArgvInvalid, "argv"},
		{ConsentEntry{Scope: ScopeRememberExactArgv, GrantRef: "g", Cwd: cwd, Argv: []string{"/usr/bin/python3", "a\x00"}}, CodeArgvInvalid, "argv[1]"},
		{ConsentEntry{Scope: ScopeRememberArgvPrefix, GrantRef: "g", Cwd: cwd, Prefix: []string{"/usr/bin/python3", "-Bc"}}, CodeConsentPrefixTooBroad, "prefix[1]"},
		{ConsentEntry{Scope: ScopeRememberArgvPrefix, GrantRef: "g", Cwd: cwd, Prefix: []string{"/usr/bin/python3", "x.py"}, VariablePrefixes: []string{"src/", "-"}}, CodeConsentPrefixTooBroad, "variablePrefixes[1]"},
		{ConsentEntry{Scope: ScopeRememberArgvPrefix, GrantRef: "g", Cwd: cwd, Prefix: []string{"/usr/bin/python3"}, Argv: []string{"/usr/bin/python3"}}, CodeConsentScopeInvalid, "argv"},
		{ConsentEntry{Scope: ScopeDeny, GrantRef: "g", Cwd: cwd, VariablePrefixes: []string{"x"}}, CodeConsentScopeInvalid, "prefix"},
		{ConsentEntry{Scope: ScopeDeny, GrantRef: "g", Cwd: CwdAddress{Root: "repo", Path: "a/"}}, CodePathInvalidComponent, "cwd.path"},
	}
	for _, c := range cases {
		r := ValidateConsentEntry(p, c.e)
		if r == nil || r.Code != c.code || r.Field != c.field {
			t.Errorf("%+v: %v, want %s at %q", c.e, r, c.code, c.field)
		}
	}
	rootOnly := p
	rootOnly.CwdPolicy = CwdRootOnly
	if r := ValidateConsentEntry(rootOnly, ConsentEntry{Scope: ScopeDeny, GrantRef: "g", Cwd: CwdAddress{Root: "repo", Path: "sub"}}); r == nil || r.Code != CodeCwdNotAllowed {
		t.Errorf("consent cannot widen the cwd policy: %v", r)
	}
}

// A grant never loosens the profile's caps: the admission covers argv only,
// and intent validation still uses the base profile.
func TestConsentNeverLoosensCaps(t *testing.T) {
	p := pythonProfile()
	e := ConsentEntry{Scope: ScopeRememberExactArgv, GrantRef: "g", Argv: []string{"/usr/bin/python3", "tools/migrate.py"}, Cwd: CwdAddress{Root: "repo"}}
	in := CommandIntent{ProfileRef: "py", Argv: e.Argv, Cwd: e.Cwd, TimeoutSeconds: p.MaxTimeoutSeconds + 1, OutputBytes: 1}
	if a := Admit(p, []ConsentEntry{e}, in, ""); !a.Admitted || a.By != "g" {
		t.Fatalf("admission = %+v", a)
	}
	if rs := ValidateIntentAgainstProfile(p, in); len(rs) != 1 || rs[0].Code != CodeTimeoutAboveMax {
		t.Fatalf("caps must stay the base profile's: %v", rs)
	}
}

func TestAdmitTieBreakIsDeterministic(t *testing.T) {
	p := pythonProfile()
	cwd := CwdAddress{Root: "repo"}
	argv := []string{"/usr/bin/python3", "tools/migrate.py"}
	a := ConsentEntry{Scope: ScopeRememberExactArgv, GrantRef: "grant-b", Argv: argv, Cwd: cwd}
	b := ConsentEntry{Scope: ScopeRememberExactArgv, GrantRef: "grant-a", Argv: argv, Cwd: cwd}
	in := CommandIntent{Argv: argv, Cwd: cwd}
	for _, entries := range [][]ConsentEntry{{a, b}, {b, a}} {
		if got := Admit(p, entries, in, ""); got.By != "grant-a" {
			t.Errorf("By = %q, want grant-a", got.By)
		}
	}
}

// BenchmarkAdmit measures argv admission through Admit with a typical profile
// and four consent entries, the argv admitted by the broadest entry.
func BenchmarkAdmit(b *testing.B) {
	p := pythonProfile()
	cwd := CwdAddress{Root: "repo", Path: "svc"}
	entries := []ConsentEntry{
		{Scope: ScopeDeny, GrantRef: "g-deny", Argv: []string{"/usr/bin/python3", "tools/drop_db.py"}, Cwd: cwd},
		{Scope: ScopeAllowOnce, GrantRef: "g-once", Argv: []string{"/usr/bin/python3", "tools/migrate.py"}, Cwd: cwd, CommandRef: "ns/cmd-1"},
		{Scope: ScopeRememberExactArgv, GrantRef: "g-exact", Argv: []string{"/usr/bin/python3", "tools/migrate.py", "--dry-run"}, Cwd: cwd},
		{Scope: ScopeRememberArgvPrefix, GrantRef: "g-prefix", Prefix: []string{"/usr/bin/python3", "tools/fmt.py"}, VariablePrefixes: []string{"src/", "--line-length="}, Cwd: cwd},
	}
	in := CommandIntent{ProfileRef: "py", Argv: []string{"/usr/bin/python3", "tools/fmt.py", "src/a.py", "src/b.py", "--line-length=100"}, Cwd: cwd, TimeoutSeconds: 60, OutputBytes: 4096}
	b.ReportAllocs()
	for b.Loop() {
		if a := Admit(p, entries, in, "ns/cmd-2"); !a.Admitted {
			b.Fatal(a.Refusal)
		}
	}
}

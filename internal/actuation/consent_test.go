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

// TestAdmitSubjectBinding: an allow-once entry admits only the command object (UID) and the
// argv digest it was reviewed for, and every entry only on its environment.
func TestAdmitSubjectBinding(t *testing.T) {
	p := pythonProfile()
	cwd := CwdAddress{Root: "repo"}
	argv := []string{"/usr/bin/python3", "tools/migrate.py"}
	in := CommandIntent{ProfileRef: "py", Argv: argv, Cwd: cwd}
	digest := ArgvDigest("py", argv, cwd)
	once := ConsentEntry{Scope: ScopeAllowOnce, GrantRef: "g", Argv: argv, Cwd: cwd, CommandRef: "ns/x", CommandUID: "uid-1", ArgvDigest: digest, Environment: "e"}
	me := Subject{Ref: "ns/x", UID: "uid-1", Environment: "e"}
	if a := AdmitSubject(p, []ConsentEntry{once}, in, me); !a.Admitted || a.By != "g" || a.Scope != ScopeAllowOnce {
		t.Fatalf("the bound command is not admitted: %+v", a)
	}
	other := []string{"/usr/bin/python3", "tools/evil.py"}
	cases := map[string]struct {
		in CommandIntent
		s  Subject
		e  ConsentEntry
	}{
		"recreated object (same name, new UID)": {in, Subject{Ref: "ns/x", UID: "uid-2", Environment: "e"}, once},
		"recreated object with another argv":    {CommandIntent{ProfileRef: "py", Argv: other, Cwd: cwd}, Subject{Ref: "ns/x", UID: "uid-2", Environment: "e"}, once},
		"another argv, same object":             {CommandIntent{ProfileRef: "py", Argv: other, Cwd: cwd}, me, once},
		"another environment":                   {in, Subject{Ref: "ns/x", UID: "uid-1", Environment: "e2"}, once},
		"another profile (digest)":              {CommandIntent{ProfileRef: "other", Argv: argv, Cwd: cwd}, me, once},
		"entry without a digest for an object":  {in, me, func() ConsentEntry { e := once; e.ArgvDigest = ""; return e }()},
		"entry digest of another argv":          {in, me, func() ConsentEntry { e := once; e.ArgvDigest = ArgvDigest("py", other, cwd); return e }()},
		"remembered entry on another environment": {in, Subject{Ref: "ns/y", UID: "uid-3", Environment: "e2"},
			ConsentEntry{Scope: ScopeRememberExactArgv, GrantRef: "r", Argv: argv, Cwd: cwd, Environment: "e"}},
	}
	for name, c := range cases {
		if a := AdmitSubject(p, []ConsentEntry{c.e}, c.in, c.s); a.Admitted {
			t.Errorf("%s: admitted by %s", name, a.By)
		}
	}
	remembered := ConsentEntry{Scope: ScopeRememberExactArgv, GrantRef: "r", Argv: argv, Cwd: cwd, Environment: "e"}
	if a := AdmitSubject(p, []ConsentEntry{remembered}, in, Subject{Ref: "ns/y", UID: "uid-3", Environment: "e"}); !a.Admitted || a.By != "r" {
		t.Fatalf("a remembered entry admits another command on its environment: %+v", a)
	}
	// Binding fields belong to allow-once only.
	bad := remembered
	bad.CommandUID = "uid-1"
	if r := ValidateConsentEntry(p, bad); r == nil || r.Code != CodeConsentScopeInvalid {
		t.Fatalf("a remembered entry with a command UID: %v", r)
	}
}

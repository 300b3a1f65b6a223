package actuation

import "testing"

// TestRememberedEntryHeldToReviewedContext: a remembered entry admits only while the
// environment's operational context is the class it was reviewed under or a lower one; an
// entry that recorded no context admits under no context (fails closed); an allow-once entry
// is left to the admission-context rule and a deny entry denies under every context.
func TestRememberedEntryHeldToReviewedContext(t *testing.T) {
	p := pythonProfile()
	cwd := CwdAddress{Root: "repo"}
	argv := []string{"/usr/bin/python3", "tools/migrate.py"}
	in := CommandIntent{ProfileRef: "py", Argv: argv, Cwd: cwd}
	exact := ConsentEntry{Scope: ScopeRememberExactArgv, GrantRef: "r", Argv: argv, Cwd: cwd, Environment: "e"}
	prefix := ConsentEntry{Scope: ScopeRememberArgvPrefix, GrantRef: "p", Prefix: []string{"/usr/bin/python3"}, VariablePrefixes: []string{"tools/"}, Cwd: cwd, Environment: "e"}
	with := func(e ConsentEntry, c ContextClass) ConsentEntry { e.Context = c; return e }
	subject := func(c ContextClass) Subject { return Subject{Ref: "ns/x", UID: "uid-1", Environment: "e", Context: c} }
	for _, tc := range []struct {
		name  string
		entry ConsentEntry
		now   ContextClass
		admit bool
	}{
		{"exact reviewed under test, environment test", with(exact, ContextTest), ContextTest, true},
		{"exact reviewed under test, environment raised to production", with(exact, ContextTest), ContextProduction, false},
		{"exact reviewed under test, environment raised to critical", with(exact, ContextTest), ContextCritical, false},
		{"exact reviewed under production, environment test", with(exact, ContextProduction), ContextTest, true},
		{"prefix reviewed under research, environment test", with(prefix, ContextResearch), ContextTest, false},
		{"prefix reviewed under critical, environment critical", with(prefix, ContextCritical), ContextCritical, true},
		{"exact that recorded no context, environment test: fails closed", exact, ContextTest, false},
		{"environment not planned (no context): the entry holds", with(exact, ContextTest), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := AdmitSubject(p, []ConsentEntry{tc.entry}, in, subject(tc.now))
			if a.Admitted != tc.admit {
				t.Fatalf("admitted = %v (by %q, refusal %v), want %v", a.Admitted, a.By, a.Refusal, tc.admit)
			}
			if !tc.admit && (a.Refusal == nil || a.Refusal.Code != CodeConsentRequired) {
				t.Fatalf("not admitted with %v; want consent-required (the operator is asked again)", a.Refusal)
			}
		})
	}
	// A deny entry reviewed under a lower context still denies.
	deny := ConsentEntry{Scope: ScopeDeny, GrantRef: "d", Argv: argv, Cwd: cwd, Environment: "e", Context: ContextTest}
	if a := AdmitSubject(p, []ConsentEntry{deny, with(exact, ContextCritical)}, in, subject(ContextCritical)); a.Admitted || a.Refusal == nil || a.Refusal.Code != CodeConsentDenied {
		t.Fatalf("a deny reviewed under test did not deny under critical: %+v", a)
	}
	// Allow-once entries are held to the command's admission context (CheckAdmissionContext),
	// not here.
	once := ConsentEntry{Scope: ScopeAllowOnce, GrantRef: "g", Argv: argv, Cwd: cwd, CommandRef: "ns/x", CommandUID: "uid-1",
		ArgvDigest: ArgvDigest("py", argv, cwd), Environment: "e", Context: ContextTest}
	if a := AdmitSubject(p, []ConsentEntry{once}, in, subject(ContextProduction)); !a.Admitted || a.By != "g" {
		t.Fatalf("allow-once: %+v", a)
	}
}

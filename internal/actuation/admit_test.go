package actuation

import (
	"testing"
)

// AdmitCommand is the whole pipeline: every stage answers through it, with the verdict its
// callers act on (the webhook refuses Malformed, the deciders hold NeedsConsent, refuse
// Refused, start Admitted) — one table for the stages the webhook, the manager and the
// node used to assemble each on its own.
func TestAdmitCommandPipeline(t *testing.T) {
	p := Profile{Executable: "/usr/bin/make", AllowedArgPrefixes: []string{"build"}, AllowedRoots: []string{"repo"}, CwdPolicy: CwdRootOnly,
		Egress: "Deny", Credentials: "Denied", MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20, PTY: "Disabled"}
	cwd := CwdAddress{Root: "repo"}
	intent := func(argv ...string) CommandIntent {
		return CommandIntent{ProfileRef: "p", Argv: argv, Cwd: cwd, TimeoutSeconds: 10, OutputBytes: 1024}
	}
	s := Subject{Ref: "ns/c", UID: "c-uid", Environment: "e", EnvironmentUID: "e-uid"}
	remembered := func(grant string, argv ...string) ConsentEntry {
		return ConsentEntry{Scope: ScopeRememberExactArgv, GrantRef: grant, Argv: argv, Cwd: cwd, Environment: "e", EnvironmentUID: "e-uid"}
	}
	deny := ConsentEntry{Scope: ScopeDeny, GrantRef: "no", Argv: []string{"/usr/bin/make", "clean"}, Cwd: cwd, Environment: "e", EnvironmentUID: "e-uid"}
	lapse := func(e ConsentEntry) *Refusal {
		return Refuse(CodeConsentRevoked, "grantRef", "grant %s was revoked", e.GrantRef)
	}
	overCap := intent("/usr/bin/make", "build")
	overCap.TimeoutSeconds = 3600
	for _, c := range []struct {
		name      string
		in        CommandIntent
		grants    []ConsentEntry
		live      GrantCheck
		verdict   Verdict
		code      Code
		by        string
		malformed bool
	}{
		{"profile admits", intent("/usr/bin/make", "build"), nil, nil, VerdictAdmitted, "", AdmittedByProfile, false},
		{"empty argv", intent(), nil, nil, VerdictRefused, CodeArgvInvalid, "", true},
		{"shell string as the program", intent("make build; rm -rf /"), nil, nil, VerdictRefused, CodeShellString, "", true},
		{"timeout over the profile's cap", overCap, nil, nil, VerdictRefused, "", "", true},
		{"another executable", intent("/usr/bin/python3", "x"), nil, nil, VerdictRefused, CodeArgvNotAdmitted, "", false},
		{"an argv an operator could approve", intent("/usr/bin/make", "test"), nil, nil, VerdictNeedsConsent, CodeConsentRequired, "", false},
		{"a remembered grant admits", intent("/usr/bin/make", "test"), []ConsentEntry{remembered("g", "/usr/bin/make", "test")}, nil, VerdictAdmitted, "", "g", false},
		{"a deny entry refuses", intent("/usr/bin/make", "clean"), []ConsentEntry{deny}, nil, VerdictRefused, CodeConsentDenied, "no", false},
		{"the only grant lapsed where it is checked", intent("/usr/bin/make", "test"), []ConsentEntry{remembered("g", "/usr/bin/make", "test")}, lapse, VerdictRefused, CodeConsentRevoked, "", false},
		{"the profile admits whatever the grants", intent("/usr/bin/make", "build"), []ConsentEntry{remembered("g", "/usr/bin/make", "build")}, lapse, VerdictAdmitted, "", AdmittedByProfile, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := AdmitCommand(p, c.grants, c.in, s, c.live)
			if d.Verdict != c.verdict || d.Malformed != c.malformed {
				t.Fatalf("decision %+v (refusal %+v), want %s malformed=%v", d, d.Refusal, c.verdict, c.malformed)
			}
			if c.verdict == VerdictAdmitted {
				if d.Refusal != nil || !d.Admitted || d.By != c.by {
					t.Fatalf("admitted with %+v, want by %q and no refusal", d, c.by)
				}
				return
			}
			if d.Refusal == nil || (c.code != "" && d.Refusal.Code != c.code) {
				t.Fatalf("refusal %+v, want code %q", d.Refusal, c.code)
			}
			if d.Malformed && (len(d.Problems) == 0 || d.Problems[0] != d.Refusal) {
				t.Fatalf("malformed without its problems: %+v", d)
			}
			if d.Lapsed != (c.live != nil) {
				t.Fatalf("lapsed = %v", d.Lapsed)
			}
		})
	}
}

package actuation

import (
	"strings"
	"testing"
)

func TestArgvDigestBindsEveryPart(t *testing.T) {
	base := ArgvDigest("p", []string{"/usr/bin/go", "test"}, CwdAddress{Root: "repo"})
	if !IsDigest(base) {
		t.Fatalf("%q is not a digest", base)
	}
	others := []string{
		ArgvDigest("q", []string{"/usr/bin/go", "test"}, CwdAddress{Root: "repo"}),
		ArgvDigest("p", []string{"/usr/bin/go", "vet"}, CwdAddress{Root: "repo"}),
		ArgvDigest("p", []string{"/usr/bin/go", "test"}, CwdAddress{Root: "docs"}),
		ArgvDigest("p", []string{"/usr/bin/go", "test"}, CwdAddress{Root: "repo", Path: "a"}),
		ArgvDigest("p", []string{"/usr/bin/go test"}, CwdAddress{Root: "repo"}),
	}
	for i, d := range others {
		if d == base {
			t.Errorf("variant %d collides with the base digest", i)
		}
	}
	if ArgvDigest("p", nil, CwdAddress{Root: "r"}) != ArgvDigest("p", []string{}, CwdAddress{Root: "r"}) {
		t.Error("nil and empty argv must digest alike")
	}
}

func TestConsentDeltaDigest(t *testing.T) {
	d := ConsentDelta{Capability: "workbench.terminal.command", OperationDigest: ArgvDigest("p", []string{"/x"}, CwdAddress{Root: "r"}),
		Workspace: "ns/env", Roots: []string{"b", "a"}, Scope: ScopeRememberExactArgv, Argv: []string{"/x"},
		SafetyCaps: SafetyCaps{TimeoutSeconds: 60, OutputBytes: 1024, Egress: EgressDeny, Credentials: CredentialsDenied}}
	base := ConsentDeltaDigest(d)
	reordered := d
	reordered.Roots = []string{"a", "b"}
	if ConsentDeltaDigest(reordered) != base {
		t.Error("roots are a set: order must not change the digest")
	}
	if d.Roots[0] != "b" {
		t.Error("ConsentDeltaDigest must not mutate its input")
	}
	for name, mutate := range map[string]func(*ConsentDelta){
		"capability": func(x *ConsentDelta) { x.Capability = "workbench.file.write" },
		"workspace":  func(x *ConsentDelta) { x.Workspace = "ns/env-2" },
		"scope":      func(x *ConsentDelta) { x.Scope = ScopeAllowOnce },
		"output":     func(x *ConsentDelta) { x.SafetyCaps.OutputBytes++ },
		"egress":     func(x *ConsentDelta) { x.SafetyCaps.Egress = "Allow" },
		"roots":      func(x *ConsentDelta) { x.Roots = []string{"a"} },
	} {
		x := d
		x.Roots = append([]string(nil), d.Roots...)
		mutate(&x)
		if ConsentDeltaDigest(x) == base {
			t.Errorf("changing %s does not change the digest", name)
		}
	}
	if got := ApprovalRef(base); got != "approval:consent:"+base {
		t.Errorf("ApprovalRef = %q", got)
	}
	var nilRoots ConsentDelta
	c, _ := CanonicalJSON(ConsentDelta{Roots: []string{}})
	if ConsentDeltaDigest(nilRoots) != DigestBytes(c) {
		t.Error("nil roots must digest as []")
	}
}

func TestProfileDigestSetsAreUnordered(t *testing.T) {
	a := goTestProfile()
	b := goTestProfile()
	b.AllowedArgPrefixes = []string{"-v", "./", "-run="}
	b.Env.Defaults = []EnvVar{b.Env.Defaults[1], b.Env.Defaults[0]}
	if ProfileDigest(a) != ProfileDigest(b) {
		t.Error("reordering set-valued lists changed the profile digest")
	}
	if b.AllowedArgPrefixes[0] != "-v" {
		t.Error("ProfileDigest must not mutate its input")
	}
	c := goTestProfile()
	c.FixedArgs = []string{"test", "-count=1"}
	if ProfileDigest(a) == ProfileDigest(c) {
		t.Error("fixedArgs must be bound")
	}
}

func TestCanonicalJSON(t *testing.T) {
	got, err := CanonicalJSON(map[string]any{"b": "<&>", "a": 1.0, "c": []int{2, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":1,"b":"<&>","c":[2,1]}`; string(got) != want {
		t.Errorf("CanonicalJSON = %s, want %s", got, want)
	}
	if _, err := Digest(func() {}); err == nil {
		t.Error("Digest of an unencodable value must fail")
	}
	for _, s := range []string{"", "sha256:", "sha256:" + strings.Repeat("A", 64), "sha1:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("a", 63)} {
		if IsDigest(s) {
			t.Errorf("IsDigest(%q) = true", s)
		}
	}
}

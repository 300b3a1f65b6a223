package actions

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

// The 24 codes of sensorium-os-error-codes.v1 (seed 002), verbatim.
var seedCodes = []string{
	"action-catalog-unauthorized", "action-not-allowlisted", "catalog-entry-missing", "script-hash-mismatch",
	"working-directory-forbidden", "parameters-schema-invalid", "result-schema-invalid", "result-pointer-missing",
	"result-pointer-field-invalid", "action-class-unknown", "action-class-unavailable", "emergency-policy-blocked",
	"action-id-missing", "action-id-format-invalid", "action-id-duplicate", "host-policy-request-forbidden",
	"allowlist-catalog-mismatch", "script-executable-missing", "sensitivity-override-forbidden", "sensitivity-keys-forbidden",
	"action-timeout", "directive-missing", "parameters-invalid", "script-not-executable",
}

func TestSeedCodesInClosedVocabulary(t *testing.T) {
	if len(seedCodes) != 24 {
		t.Fatalf("seed list has %d codes, want 24", len(seedCodes))
	}
	for _, c := range seedCodes {
		if !actuation.IsKnownCode(actuation.Code(c)) {
			t.Errorf("seed code %s is not in the closed vocabulary", c)
		}
	}
}

func baseCatalog(t *testing.T) Catalog {
	t.Helper()
	var f validationFile
	loadJSON(t, "catalog-validation.json", &f)
	var c Catalog
	for _, b := range []string{"c1", "c2", "c3", "c4", "c5", "c6", "c7"} {
		c.Actions = append(c.Actions, buildAction(t, f.Bases, b, nil))
	}
	if rs := ValidateCatalog(c); len(rs) > 0 {
		t.Fatalf("base catalog invalid: %v", rs)
	}
	return c
}

func TestRender(t *testing.T) {
	c := baseCatalog(t)
	echo, refine := c.Find("node.echo"), c.Find("node.text.refine-local")
	for _, tc := range []struct {
		name   string
		a      *Action
		params string
		argv   []string
		code   actuation.Code
	}{
		{"placeholders", echo, `{"msg":"a b;$(x)","count":3}`, []string{"printf", `%s|%s\n`, "a b;$(x)", "3"}, ""},
		{"params-json-canonical", refine, `{ "msg" : "x", "count": 2.0 }`, []string{"python3", "/opt/wb/scripts/refine.py", "--params-json", `{"count":2,"msg":"x"}`}, ""},
		{"missing-placeholder-param", echo, `{"msg":"x"}`, nil, actuation.CodeParametersInvalid},
		{"schema-violation", echo, `{"msg":"x","count":11}`, nil, actuation.CodeParametersInvalid},
		{"additional-property", echo, `{"msg":"x","count":1,"extra":true}`, nil, actuation.CodeParametersInvalid},
		{"not-object", echo, `["x"]`, nil, actuation.CodeParametersInvalid},
		{"host-policy", echo, `{"msg":"x","count":1,"host_policy":{"posture":"Normal"}}`, nil, actuation.CodeHostPolicyRequestForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, env, r := Render(tc.a, json.RawMessage(tc.params))
			if tc.code != "" {
				if r == nil || r.Code != tc.code {
					t.Fatalf("want %s, got %v (argv %q)", tc.code, r, argv)
				}
				return
			}
			if r != nil {
				t.Fatalf("refused: %v", r)
			}
			if !slices.Equal(argv, tc.argv) {
				t.Fatalf("argv %q, want %q", argv, tc.argv)
			}
			if !slices.Equal(env, tc.a.Environment) {
				t.Fatalf("env %v, want exactly the declaration's %v", env, tc.a.Environment)
			}
		})
	}
	// A structured value never reaches a single placeholder.
	a := *echo
	a.ParametersSchema = json.RawMessage(`{"type":"object","properties":{"msg":{},"count":{}}}`)
	if _, _, r := Render(&a, json.RawMessage(`{"msg":{"a":1},"count":1}`)); r == nil || r.Code != actuation.CodeParametersInvalid {
		t.Fatalf("object into a placeholder: got %v", r)
	}
}

func TestResultPointers(t *testing.T) {
	c := baseCatalog(t)
	a := c.Find("node.text.refine-local") // revision_path, metrics.*, verification/status
	got, r := ResultPointers(a, []byte(`{"revision_path":"out/r1.md","metrics.tokens":12,"metrics.ms":3,"verification/status":"ok","secret":"x"}`))
	if r != nil {
		t.Fatal(r)
	}
	want := map[string]string{"revision_path": `"out/r1.md"`, "metrics.tokens": "12", "metrics.ms": "3", "verification/status": `"ok"`}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v (undeclared keys are never propagated)", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, tc := range []struct{ out, code string }{
		{`{"metrics.tokens":1,"verification/status":"ok"}`, "result-pointer-missing"},
		{`{"revision_path":"x","verification/status":"ok"}`, "result-pointer-missing"},
		{`not json`, "result-schema-invalid"},
		{`{"a":1} {"b":2}`, "result-schema-invalid"},
		{`[1,2]`, "result-schema-invalid"},
	} {
		if _, r := ResultPointers(a, []byte(tc.out)); r == nil || string(r.Code) != tc.code {
			t.Errorf("%s: want %s, got %v", tc.out, tc.code, r)
		}
	}
}

func key(name string) (ed25519.PrivateKey, string) {
	seed := sha256.Sum256([]byte(name))
	priv := ed25519.NewKeyFromSeed(seed[:])
	return priv, PublicKeyOf(priv)
}

func TestAuthorize(t *testing.T) {
	c := baseCatalog(t)
	spec, _ := json.Marshal(c)
	digest, err := SpecDigestJSON(spec)
	if err != nil {
		t.Fatal(err)
	}
	if d2, _ := SpecDigest(c); d2 != digest {
		t.Fatalf("SpecDigest %s != SpecDigestJSON %s", d2, digest)
	}
	alice, alicePub := key("alice")
	mallory, _ := key("mallory")
	all := []Class{"C1", "C2", "C3", "C4", "C5", "C6", "C7"}
	signers := []Signer{
		{Name: "alice", PublicKey: alicePub, Namespaces: []string{"team-a"}, Classes: all},
		{Name: "narrow", PublicKey: alicePub, Namespaces: []string{"*"}, Classes: []Class{"C1"}},
	}
	sign := func(priv ed25519.PrivateKey, signer, d string) *Signature {
		v, err := Sign(priv, d)
		if err != nil {
			t.Fatal(err)
		}
		return &Signature{SignerRef: signer, SpecDigest: d, Value: v}
	}
	good := sign(alice, "alice", digest)
	edited := c
	edited.Actions = slices.Clone(c.Actions)
	edited.Actions[0].ArgvTemplate = []string{"printf", "{{msg}}"}
	editedSpec, _ := json.Marshal(edited)
	params := json.RawMessage(`{"msg":"hi","count":1}`)
	emergency := Policy{Posture: PostureEmergency}
	for _, tc := range []struct {
		name   string
		ns     string
		spec   []byte
		sig    *Signature
		pol    Policy
		action string
		code   actuation.Code
		unauth bool
	}{
		{"signed", "team-a", spec, good, Policy{}, "node.echo", "", false},
		{"unsigned-strict", "team-a", spec, nil, Policy{}, "node.echo", actuation.CodeActionCatalogUnauthorized, false},
		{"unsigned-bootstrap", "team-a", spec, nil, Policy{SignaturePolicy: SignatureBootstrap}, "node.echo", "", true},
		{"edited-after-signing", "team-a", editedSpec, good, Policy{}, "node.echo", actuation.CodeActionCatalogUnauthorized, false},
		{"edited-after-signing-bootstrap", "team-a", editedSpec, good, Policy{SignaturePolicy: SignatureBootstrap}, "node.echo", actuation.CodeActionCatalogUnauthorized, false},
		{"wrong-key", "team-a", spec, sign(mallory, "alice", digest), Policy{}, "node.echo", actuation.CodeActionCatalogUnauthorized, false},
		{"unknown-signer", "team-a", spec, sign(mallory, "mallory", digest), Policy{}, "node.echo", actuation.CodeCatalogSignerUnknown, false},
		{"namespace-out-of-scope", "team-b", spec, good, Policy{}, "node.echo", actuation.CodeCatalogSignerOutOfScope, false},
		{"class-out-of-scope", "team-b", spec, sign(alice, "narrow", digest), Policy{}, "node.write", actuation.CodeCatalogSignerOutOfScope, false},
		{"class-in-scope-wildcard-ns", "team-b", spec, sign(alice, "narrow", digest), Policy{}, "node.echo", "", false},
		{"not-allowlisted", "team-a", spec, good, Policy{}, "node.nope", actuation.CodeActionNotAllowlisted, false},
		{"emergency-c3", "team-a", spec, good, emergency, "node.write", actuation.CodeEmergencyPolicyBlocked, false},
		{"emergency-c6", "team-a", spec, good, emergency, "node.compose", actuation.CodeEmergencyPolicyBlocked, false},
		{"emergency-c1-runs", "team-a", spec, good, emergency, "node.echo", "", false},
		{"emergency-exception", "team-a", spec, good, Policy{Posture: PostureEmergency, EmergencyExceptions: []Exception{{Namespace: "team-a", Catalog: "cat", ActionID: "node.write"}}}, "node.write", "", false},
		{"emergency-exception-other-ns", "team-a", spec, good, Policy{Posture: PostureEmergency, EmergencyExceptions: []Exception{{Namespace: "team-b", Catalog: "cat", ActionID: "node.write"}}}, "node.write", actuation.CodeEmergencyPolicyBlocked, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := params
			if tc.action == "node.write" || tc.action == "node.compose" || tc.action == "node.gated" {
				p = json.RawMessage(`{"msg":"f.txt"}`)
			}
			d := Authorize(AuthorizeInput{Namespace: tc.ns, CatalogName: "cat", SpecJSON: tc.spec, Signature: tc.sig, Signers: signers, Policy: tc.pol, ActionID: tc.action, Params: p})
			if tc.code != "" {
				if d.Allowed || d.Refusal == nil || d.Refusal.Code != tc.code {
					t.Fatalf("want %s, got allowed=%v %v", tc.code, d.Allowed, d.Refusal)
				}
				return
			}
			if !d.Allowed {
				t.Fatalf("refused: %v", d.Refusal)
			}
			if d.Unauthorized != tc.unauth {
				t.Fatalf("unauthorized = %v, want %v", d.Unauthorized, tc.unauth)
			}
			if len(d.Argv) == 0 || !strings.HasPrefix(d.ParamsDigest, "sha256:") {
				t.Fatalf("decision without argv or params digest: %+v", d)
			}
		})
	}
	// Pinned digest and timeouts.
	d := Authorize(AuthorizeInput{Namespace: "team-a", CatalogName: "cat", SpecJSON: spec, Signature: good, Signers: signers, ActionID: "node.echo", Params: params, ExpectedSpecDigest: "sha256:" + strings.Repeat("0", 64)})
	if d.Refusal == nil || d.Refusal.Code != actuation.CodeAllowlistCatalogMismatch {
		t.Fatalf("pinned digest mismatch: %v", d.Refusal)
	}
	d = Authorize(AuthorizeInput{Namespace: "team-a", CatalogName: "cat", SpecJSON: spec, Signature: good, Signers: signers, ActionID: "node.echo", Params: params, TimeoutSeconds: 61})
	if d.Refusal == nil || d.Refusal.Code != actuation.CodeTimeoutAboveMax {
		t.Fatalf("timeout above max: %v", d.Refusal)
	}
	d = Authorize(AuthorizeInput{Namespace: "team-a", SpecJSON: spec, ActionID: "node.echo"})
	if d.Refusal == nil || d.Refusal.Code != actuation.CodeDirectiveMissing {
		t.Fatalf("no catalog: %v", d.Refusal)
	}
	// Per-action status: the narrow signer authorizes C1 only.
	cat, dg, _ := ParseCatalog(spec)
	v, states := CatalogStates("team-b", cat, dg, sign(alice, "narrow", digest), signers, Policy{})
	if v.State != StateAuthorized || len(states) != 7 {
		t.Fatalf("verdict %+v, %d states", v, len(states))
	}
	for _, s := range states {
		want := StateUnauthorized
		if s.Class == ClassReadOnlySpawn {
			want = StateAuthorized
		}
		if s.Authorization != want {
			t.Errorf("%s (%s): %s, want %s", s.ID, s.Class, s.Authorization, want)
		}
	}
}

func TestSignRoundTrip(t *testing.T) {
	pub, seed, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ParsePrivateKey(seed + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if PublicKeyOf(priv) != pub {
		t.Fatal("public key of the parsed seed differs")
	}
	d := "sha256:" + strings.Repeat("ab", 32)
	sig, err := Sign(priv, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(pub, d, sig); err != nil {
		t.Fatal(err)
	}
	if err := Verify(pub, "sha256:"+strings.Repeat("cd", 32), sig); err == nil {
		t.Fatal("a signature verified over another digest")
	}
}

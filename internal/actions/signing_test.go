package actions

import (
	"encoding/json"
	"slices"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

// signingFixture is the base catalog with a signing block on node.echo naming signer grant,
// signed by signedBy (both signers share one key and scope).
func signingFixture(t *testing.T, grant, signedBy string) AuthorizeInput {
	t.Helper()
	c := baseCatalog(t)
	c.Actions[0].Signing = &Signing{SignerRef: grant, AllowedDomains: []string{"git.commit.v1"}, MaxSignatures: 1}
	if rs := ValidateCatalog(c); len(rs) > 0 {
		t.Fatalf("catalog with a signing block invalid: %v", rs)
	}
	spec, _ := json.Marshal(c)
	digest, _ := SpecDigestJSON(spec)
	priv, pub := key("alice")
	v, err := Sign(priv, digest)
	if err != nil {
		t.Fatal(err)
	}
	all := []Class{"C1", "C2", "C3", "C4", "C5", "C6", "C7"}
	return AuthorizeInput{Namespace: "team-a", CatalogName: "cat", SpecJSON: spec, ActionID: "node.echo",
		Params:    json.RawMessage(`{"msg":"hi","count":1}`),
		Signature: &Signature{SignerRef: signedBy, SpecDigest: digest, Value: v},
		Signers: []Signer{{Name: "alice", PublicKey: pub, Namespaces: []string{"team-a"}, Classes: all},
			{Name: "bob", PublicKey: pub, Namespaces: []string{"team-a"}, Classes: all}}}
}

// TestSigningBlockScopedSigner: a signing block authorizes only when the catalog's
// verified signer is the one it names; another trusted signer in scope, or an unsigned
// catalog under Bootstrap, leaves the action Unauthorized (signing-signer-mismatch), in
// the run decision and in the per-action status.
func TestSigningBlockScopedSigner(t *testing.T) {
	in := signingFixture(t, "alice", "alice")
	if d := Authorize(in); !d.Allowed {
		t.Fatalf("named signer signed: refused %v", d.Refusal)
	}
	in = signingFixture(t, "alice", "bob")
	if d := Authorize(in); d.Allowed || d.Refusal.Code != actuation.CodeSigningSignerMismatch {
		t.Fatalf("other signer: want %s, got allowed=%v %v", actuation.CodeSigningSignerMismatch, d.Allowed, d.Refusal)
	}
	cat, dg, _ := ParseCatalog(in.SpecJSON)
	_, states := CatalogStates("team-a", cat, dg, in.Signature, in.Signers, Policy{})
	if states[0].Authorization != StateUnauthorized || states[0].Code != actuation.CodeSigningSignerMismatch || states[1].Authorization != StateAuthorized {
		t.Fatalf("per-action states: %+v", states[:2])
	}
	in.Signature, in.Policy = nil, Policy{SignaturePolicy: SignatureBootstrap}
	if d := Authorize(in); d.Allowed || d.Refusal.Code != actuation.CodeSigningSignerMismatch {
		t.Fatalf("unsigned bootstrap: want %s, got allowed=%v %v", actuation.CodeSigningSignerMismatch, d.Allowed, d.Refusal)
	}
}

// TestSigningRequestBounds: a run's request must name an allowed domain and at most
// maxSignatures; an action without a block grants nothing.
func TestSigningRequestBounds(t *testing.T) {
	in := signingFixture(t, "alice", "alice")
	for _, tc := range []struct {
		name string
		req  *SigningRequest
		code actuation.Code
	}{
		{"none", nil, ""},
		{"within", &SigningRequest{Domain: "git.commit.v1", Signatures: 1}, ""},
		{"over-max", &SigningRequest{Domain: "git.commit.v1", Signatures: 2}, actuation.CodeSigningMaxSignaturesExceeded},
		{"zero", &SigningRequest{Domain: "git.commit.v1", Signatures: 0}, actuation.CodeSigningMaxSignaturesExceeded},
		{"other-domain", &SigningRequest{Domain: "git.tag.v1", Signatures: 1}, actuation.CodeSigningDomainNotAllowed},
	} {
		in.Signing = tc.req
		d := Authorize(in)
		if tc.code == "" && !d.Allowed {
			t.Errorf("%s: refused %v", tc.name, d.Refusal)
		}
		if tc.code != "" && (d.Allowed || d.Refusal.Code != tc.code) {
			t.Errorf("%s: want %s, got allowed=%v %v", tc.name, tc.code, d.Allowed, d.Refusal)
		}
	}
	in.ActionID, in.Params = "node.write", json.RawMessage(`{"msg":"f.txt"}`)
	in.Signing = &SigningRequest{Domain: "git.commit.v1", Signatures: 1}
	if d := Authorize(in); d.Allowed || d.Refusal.Code != actuation.CodeSigningDomainNotAllowed {
		t.Fatalf("action without a signing block: got allowed=%v %v", d.Allowed, d.Refusal)
	}
}

// TestSigningBlockStructure: malformed blocks are structural refusals with their code.
func TestSigningBlockStructure(t *testing.T) {
	for name, s := range map[string]*Signing{
		"no-signer":     {AllowedDomains: []string{"git.commit.v1"}, MaxSignatures: 1},
		"no-domains":    {SignerRef: "alice", MaxSignatures: 1},
		"bad-domain":    {SignerRef: "alice", AllowedDomains: []string{"Git Commit"}, MaxSignatures: 1},
		"repeat-domain": {SignerRef: "alice", AllowedDomains: []string{"a.v1", "a.v1"}, MaxSignatures: 1},
		"max-zero":      {SignerRef: "alice", AllowedDomains: []string{"a.v1"}},
		"max-above":     {SignerRef: "alice", AllowedDomains: []string{"a.v1"}, MaxSignatures: MaxSignaturesBound + 1},
		"bad-key-kind":  {SignerRef: "alice", KeyKind: "root", AllowedDomains: []string{"a.v1"}, MaxSignatures: 1},
	} {
		c := baseCatalog(t)
		c.Actions[0].Signing = s
		rs := ActionRefusals(c, c.Actions[0].ID)
		if len(rs) == 0 || rs[0].Code != actuation.CodeSigningBlockInvalid {
			t.Errorf("%s: want %s, got %v", name, actuation.CodeSigningBlockInvalid, rs)
		}
	}
}

// TestObservationLane: every class's baseline effects and sensitivity, declared effects
// and a raised class add, observed effects add, nothing subtracts, the list is bounded.
func TestObservationLane(t *testing.T) {
	c := baseCatalog(t)
	want := map[Class][]string{
		ClassReadOnlySpawn:     {EffectDiskAccessTimestamp},
		ClassAllowlistedScript: {EffectDiskAccessTimestamp},
		ClassScopedFSWrite:     {EffectDiskAccessTimestamp, EffectLocalFSWrite},
		ClassEgressNetwork:     {EffectNetworkEgress},
		ClassArtifactProducing: {EffectArtifactLaneWrite, EffectDiskAccessTimestamp},
	}
	for i := range c.Actions {
		a := &c.Actions[i]
		o := ObservationOf(a, Observed{})
		if o.SensitivityClass != BaselineSensitivity {
			t.Errorf("%s: sensitivity %q", a.ID, o.SensitivityClass)
		}
		if w, ok := want[a.Class]; ok && !slices.Equal(o.IncidentalEffects, w) {
			t.Errorf("%s (%s): effects %v, want %v", a.ID, a.Class, o.IncidentalEffects, w)
		}
		if a.Class == ClassComposed {
			for _, e := range a.Effects() {
				for _, b := range BaselineEffects(&Action{Class: classOfEffect(e)}) {
					if !slices.Contains(o.IncidentalEffects, b) {
						t.Errorf("composed %s: %v lacks %s's baseline %s", a.ID, o.IncidentalEffects, e, b)
					}
				}
			}
		}
	}
	a := c.Find("node.echo")
	a.IncidentalEffects = []string{"clipboard-read"}
	a.Sensitivity = map[string]string{"class": "restricted"}
	a.ResultContract.SignalKind, a.ResultContract.SignalFamily = "os.fetch", "os/fetch-result"
	if rs := ActionRefusals(c, a.ID); len(rs) > 0 {
		t.Fatalf("declared lane invalid: %v", rs)
	}
	o := ObservationOf(a, Observed{WroteFiles: true, Connected: true})
	if o.SensitivityClass != "restricted" || o.SignalKind != "os.fetch" || o.SignalFamily != "os/fetch-result" ||
		!slices.Equal(o.IncidentalEffects, []string{"clipboard-read", EffectDiskAccessTimestamp, EffectLocalFSWrite, EffectNetworkEgress}) {
		t.Fatalf("observation %+v", o)
	}
	// The run's declared observation is part of the allowed decision.
	spec, _ := json.Marshal(c)
	d := Authorize(AuthorizeInput{Namespace: "ns", CatalogName: "cat", SpecJSON: spec, ActionID: a.ID, Params: json.RawMessage(`{"msg":"hi","count":1}`),
		Policy: Policy{SignaturePolicy: SignatureBootstrap}})
	if !d.Allowed || d.Observation.SignalFamily != "os/fetch-result" || !slices.Contains(d.Observation.IncidentalEffects, "clipboard-read") {
		t.Fatalf("decision observation: %v %+v", d.Refusal, d.Observation)
	}
	// Bounds: too many or malformed declared effects, a malformed family.
	a.IncidentalEffects = []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}
	if rs := ActionRefusals(c, a.ID); len(rs) == 0 || rs[0].Code != actuation.CodeIncidentalEffectInvalid {
		t.Errorf("nine effects: %v", rs)
	}
	a.IncidentalEffects = []string{"Disk Write"}
	if rs := ActionRefusals(c, a.ID); len(rs) == 0 || rs[0].Code != actuation.CodeIncidentalEffectInvalid {
		t.Errorf("malformed effect: %v", rs)
	}
	a.IncidentalEffects, a.ResultContract.SignalFamily = nil, "no family"
	if rs := ActionRefusals(c, a.ID); len(rs) == 0 || rs[0].Code != actuation.CodeResultSchemaInvalid {
		t.Errorf("malformed family: %v", rs)
	}
	many := make([]string, 0, 40)
	for i := range 40 {
		many = append(many, string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	if got := WithObserved(many, Observed{WroteFiles: true}); len(got) != MaxObservedEffects {
		t.Fatalf("observation not bounded: %d", len(got))
	}
}

func classOfEffect(e string) Class {
	switch e {
	case EffectScopedFSWrite:
		return ClassScopedFSWrite
	case EffectEgressNetwork:
		return ClassEgressNetwork
	case EffectArtifactProduce:
		return ClassArtifactProducing
	}
	return ClassReadOnlySpawn
}

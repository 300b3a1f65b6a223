package actuation

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// vectorsDir holds the golden vectors shared with every consumer.
const vectorsDir = "../../test/vectors"

// minVectors is the minimum number of vectors per kind.
var minVectors = map[string]int{
	"relative-path":    40,
	"command-profile":  40,
	"env-policy":       20,
	"digest":           10,
	"capability-match": 20,
	"consent-delta":    10,
	"patch-hygiene":    20,
}

type vectorFile struct {
	Schema      string   `json:"schema"`
	Kind        string   `json:"kind"`
	Description string   `json:"description"`
	Vectors     []vector `json:"vectors"`
}

type vector struct {
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	Expect    json.RawMessage `json:"expect"`
	Canonical *string         `json:"canonical,omitempty"`
}

// expectation is the union of the expect objects of all kinds.
type expectation struct {
	OK          *bool    `json:"ok"`
	Code        Code     `json:"code"`
	Env         []EnvVar `json:"env"`
	Digest      string   `json:"digest"`
	ApprovalRef string   `json:"approvalRef"`
	Admitted    *bool    `json:"admitted"`
	By          string   `json:"by"`
	Scope       string   `json:"scope"`
	Unmet       []string `json:"unmet"`
}

// decodeStrict decodes JSON refusing unknown fields, so a typo in a vector
// cannot silently turn into a zero value.
func decodeStrict(t *testing.T, raw []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
}

func loadVectorFiles(t testing.TB) map[string]vectorFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(vectorsDir, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no vector files under %s (err %v)", vectorsDir, err)
	}
	files := map[string]vectorFile{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("reading %s: %v", p, err)
		}
		var vf vectorFile
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&vf); err != nil {
			t.Fatalf("decoding %s: %v", p, err)
		}
		if vf.Schema != "workbench-vectors.v1" {
			t.Fatalf("%s: schema %q, want workbench-vectors.v1", p, vf.Schema)
		}
		if want := vf.Kind + ".json"; filepath.Base(p) != want {
			t.Fatalf("%s: kind %q must match the file name %s", p, vf.Kind, want)
		}
		files[vf.Kind] = vf
	}
	return files
}

// refusalCode returns the code of the first refusal, or "".
func refusalCode(rs []*Refusal) Code {
	if r := FirstRefusal(rs); r != nil {
		return r.Code
	}
	return ""
}

func codeOf(r *Refusal) Code {
	if r == nil {
		return ""
	}
	return r.Code
}

// checkOK compares an ok/code expectation with a result code.
func checkOK(t *testing.T, e expectation, got Code, detail any) {
	t.Helper()
	if e.OK == nil {
		t.Fatalf("vector has no expect.ok")
	}
	if *e.OK {
		if got != "" {
			t.Errorf("want ok, got %s (%v)", got, detail)
		}
		return
	}
	if e.Code == "" || !IsKnownCode(e.Code) {
		t.Fatalf("negative vector must name a known code, has %q", e.Code)
	}
	if got != e.Code {
		t.Errorf("want %s, got %q (%v)", e.Code, got, detail)
	}
}

func TestVectors(t *testing.T) {
	files := loadVectorFiles(t)
	runners := map[string]func(*testing.T, vector, expectation){
		"relative-path":    runRelativePathVector,
		"command-profile":  runCommandProfileVector,
		"env-policy":       runEnvPolicyVector,
		"digest":           runDigestVector,
		"capability-match": runCapabilityMatchVector,
		"consent-delta":    runConsentDeltaVector,
		"patch-hygiene":    runPatchHygieneVector,
	}
	for kind, min := range minVectors {
		vf, ok := files[kind]
		if !ok {
			t.Errorf("missing vector file %s.json", kind)
			continue
		}
		if len(vf.Vectors) < min {
			t.Errorf("%s: %d vectors, want at least %d", kind, len(vf.Vectors), min)
		}
		var positive, negative int
		for _, v := range vf.Vectors {
			var e expectation
			decodeStrict(t, v.Expect, &e)
			if (e.OK != nil && *e.OK) || (e.Admitted != nil && *e.Admitted) || e.Digest != "" {
				positive++
			} else {
				negative++
			}
		}
		if kind != "digest" && (positive == 0 || negative == 0) {
			t.Errorf("%s: want positive and negative vectors, have %d and %d", kind, positive, negative)
		}
	}
	for kind, vf := range files {
		run, ok := runners[kind]
		if !ok {
			t.Errorf("vector kind %q has no runner", kind)
			continue
		}
		seen := map[string]bool{}
		for _, v := range vf.Vectors {
			if seen[v.Name] {
				t.Errorf("%s: duplicate vector name %q", kind, v.Name)
			}
			seen[v.Name] = true
			t.Run(kind+"/"+v.Name, func(t *testing.T) {
				var e expectation
				decodeStrict(t, v.Expect, &e)
				run(t, v, e)
			})
		}
	}
}

type relativePathInput struct {
	Path        string `json:"path"`
	PathBase64  string `json:"pathBase64"`
	RequireFile bool   `json:"requireFile"`
}

func (in relativePathInput) path(t testing.TB) string {
	if in.PathBase64 == "" {
		return in.Path
	}
	b, err := base64.StdEncoding.DecodeString(in.PathBase64)
	if err != nil {
		t.Fatalf("pathBase64: %v", err)
	}
	return string(b)
}

func runRelativePathVector(t *testing.T, v vector, e expectation) {
	var in relativePathInput
	decodeStrict(t, v.Input, &in)
	r := ValidateRelativePath(in.path(t), in.RequireFile)
	checkOK(t, e, codeOf(r), r)
}

type commandProfileInput struct {
	Profile Profile        `json:"profile"`
	Argv    []string       `json:"argv"`
	Intent  *CommandIntent `json:"intent"`
}

func runCommandProfileVector(t *testing.T, v vector, e expectation) {
	var in commandProfileInput
	decodeStrict(t, v.Input, &in)
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(v.Input, &raw)
	_, hasArgv := raw["argv"]
	got := func() *Refusal {
		if r := FirstRefusal(ValidateProfile(in.Profile)); r != nil {
			return r
		}
		if in.Intent != nil {
			if r := FirstRefusal(ValidateIntentAgainstProfile(in.Profile, *in.Intent)); r != nil {
				return r
			}
			return AdmitArgvByProfile(in.Profile, in.Intent.Argv)
		}
		if hasArgv {
			return AdmitArgvByProfile(in.Profile, in.Argv)
		}
		return nil
	}()
	checkOK(t, e, codeOf(got), got)
}

type envPolicyInput struct {
	Op        string   `json:"op"`
	Key       string   `json:"key"`
	Var       EnvVar   `json:"var"`
	Profile   Profile  `json:"profile"`
	Overrides []EnvVar `json:"overrides"`
}

func runEnvPolicyVector(t *testing.T, v vector, e expectation) {
	var in envPolicyInput
	decodeStrict(t, v.Input, &in)
	switch in.Op {
	case "key":
		r := ValidateEnvKey(in.Key)
		checkOK(t, e, codeOf(r), r)
	case "var":
		rs := ValidateEnvVar(in.Var)
		checkOK(t, e, refusalCode(rs), rs)
	case "curated":
		env, r := CuratedEnv(in.Profile, in.Overrides)
		checkOK(t, e, codeOf(r), r)
		if r == nil && !slices.Equal(env, e.Env) {
			t.Errorf("env = %v, want %v", env, e.Env)
		}
	default:
		t.Fatalf("unknown op %q", in.Op)
	}
}

type digestInput struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// digestOfVector computes the digest and canonical form a digest vector
// describes.
func digestOfVector(t *testing.T, in digestInput) (digest string, canonical []byte) {
	t.Helper()
	var doc any
	switch in.Type {
	case "argv":
		var a argvDigestInput
		decodeStrict(t, in.Value, &a)
		digest = ArgvDigest(a.ProfileRef, a.Argv, a.Cwd)
		doc = argvDigestInput{Argv: nonNil(a.Argv), Cwd: a.Cwd, ProfileRef: a.ProfileRef}
	case "profile":
		var p Profile
		decodeStrict(t, in.Value, &p)
		digest = ProfileDigest(p)
		doc = p
	case "capability":
		var c Capability
		decodeStrict(t, in.Value, &c)
		digest = CapabilityDigest(c)
		doc = c
	case "plan":
		var p Plan
		decodeStrict(t, in.Value, &p)
		digest = PlanDigest(p)
		doc = p
	case "context":
		var c contextDigestInput
		decodeStrict(t, in.Value, &c)
		digest = ContextDigest(c.Class, c.Summary)
		doc = c
	case "value":
		var x any
		if err := json.Unmarshal(in.Value, &x); err != nil {
			t.Fatal(err)
		}
		d, err := Digest(x)
		if err != nil {
			t.Fatal(err)
		}
		digest, doc = d, x
	default:
		t.Fatalf("unknown digest type %q", in.Type)
	}
	c, err := CanonicalJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	return digest, c
}

func runDigestVector(t *testing.T, v vector, e expectation) {
	var in digestInput
	decodeStrict(t, v.Input, &in)
	got, canonical := digestOfVector(t, in)
	if !IsDigest(e.Digest) {
		t.Fatalf("expect.digest %q is not a digest", e.Digest)
	}
	if got != e.Digest {
		t.Errorf("digest = %s, want %s", got, e.Digest)
	}
	if v.Canonical != nil {
		if string(canonical) != *v.Canonical {
			t.Errorf("canonical = %s, want %s", canonical, *v.Canonical)
		}
		if DigestBytes([]byte(*v.Canonical)) != e.Digest {
			t.Errorf("sha256 of the canonical string does not equal expect.digest")
		}
	}
}

type capabilityMatchInput struct {
	Requirement  Requirement  `json:"requirement"`
	Capability   Capability   `json:"capability"`
	Equivalences Equivalences `json:"equivalences"`
}

func runCapabilityMatchVector(t *testing.T, v vector, e expectation) {
	var in capabilityMatchInput
	decodeStrict(t, v.Input, &in)
	ok, unmet := Match(in.Requirement, in.Capability, in.Equivalences)
	dims := []string{}
	for _, u := range unmet {
		dims = append(dims, string(u.Dimension))
	}
	if e.OK == nil || ok != *e.OK {
		t.Errorf("ok = %v, want %v (unmet %v)", ok, e.OK, unmet)
	}
	want := e.Unmet
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(dims, want) {
		t.Errorf("unmet = %v, want %v", dims, want)
	}
}

type consentDeltaInput struct {
	Op         string         `json:"op"`
	Operation  *argvDigestIn  `json:"operation"`
	Delta      ConsentDelta   `json:"delta"`
	Profile    Profile        `json:"profile"`
	Entries    []ConsentEntry `json:"entries"`
	Entry      ConsentEntry   `json:"entry"`
	Intent     CommandIntent  `json:"intent"`
	CommandRef string         `json:"commandRef"`
}

type argvDigestIn struct {
	ProfileRef string     `json:"profileRef"`
	Argv       []string   `json:"argv"`
	Cwd        CwdAddress `json:"cwd"`
}

func runConsentDeltaVector(t *testing.T, v vector, e expectation) {
	var in consentDeltaInput
	decodeStrict(t, v.Input, &in)
	switch in.Op {
	case "delta-digest":
		if in.Operation != nil {
			if got := ArgvDigest(in.Operation.ProfileRef, in.Operation.Argv, in.Operation.Cwd); got != in.Delta.OperationDigest {
				t.Errorf("operationDigest = %s, ArgvDigest(operation) = %s", in.Delta.OperationDigest, got)
			}
		}
		got := ConsentDeltaDigest(in.Delta)
		if !IsDigest(e.Digest) || got != e.Digest {
			t.Errorf("digest = %s, want %s", got, e.Digest)
		}
		if ar := ApprovalRef(got); ar != e.ApprovalRef || !strings.HasPrefix(ar, "approval:consent:sha256:") {
			t.Errorf("approvalRef = %s, want %s", ar, e.ApprovalRef)
		}
		if v.Canonical != nil {
			d := in.Delta
			d.Roots = nonNil(sortedCopy(d.Roots))
			d.VariablePrefixes = sortedCopy(d.VariablePrefixes)
			c, err := CanonicalJSON(d)
			if err != nil {
				t.Fatal(err)
			}
			if string(c) != *v.Canonical || DigestBytes(c) != e.Digest {
				t.Errorf("canonical = %s, want %s", c, *v.Canonical)
			}
		}
	case "admit":
		a := Admit(in.Profile, in.Entries, in.Intent, in.CommandRef)
		if e.Admitted == nil || a.Admitted != *e.Admitted {
			t.Fatalf("admitted = %v, want %v (%v)", a.Admitted, e.Admitted, a.Refusal)
		}
		if a.By != e.By || string(a.Scope) != e.Scope {
			t.Errorf("by/scope = %q/%q, want %q/%q", a.By, a.Scope, e.By, e.Scope)
		}
		if a.Admitted {
			if a.Refusal != nil {
				t.Errorf("admitted with a refusal: %v", a.Refusal)
			}
		} else if codeOf(a.Refusal) != e.Code {
			t.Errorf("code = %q, want %q (%v)", codeOf(a.Refusal), e.Code, a.Refusal)
		}
	case "validate-entry":
		r := ValidateConsentEntry(in.Profile, in.Entry)
		checkOK(t, e, codeOf(r), r)
	default:
		t.Fatalf("unknown op %q", in.Op)
	}
}

type patchHygieneInput struct {
	Path             string `json:"path"`
	Existed          bool   `json:"existed"`
	OldMode          uint32 `json:"oldMode"`
	NewMode          uint32 `json:"newMode"`
	AllowGitMetadata bool   `json:"allowGitMetadata"`
	AllowExecutable  bool   `json:"allowExecutable"`
}

func runPatchHygieneVector(t *testing.T, v vector, e expectation) {
	var in patchHygieneInput
	decodeStrict(t, v.Input, &in)
	pol := EffectivePatchPolicy{AllowGitMetadata: in.AllowGitMetadata, AllowExecutable: in.AllowExecutable}
	r := CheckPatchTarget(pol, in.Path, in.Existed, fs.FileMode(in.OldMode), fs.FileMode(in.NewMode))
	checkOK(t, e, codeOf(r), r)
}

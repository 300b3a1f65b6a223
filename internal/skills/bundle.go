package skills

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gowebpki/jcs"

	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/actuation"
)

func isDigest(s string) bool { return actuation.IsDigest(s) }

// RedactionProfile is a bundle's redaction (seed 004 §7.3).
type RedactionProfile string

const (
	// RedactionNone keeps everything verbatim.
	RedactionNone RedactionProfile = "none"
	// RedactionTranscriptPII strips command output and patch content bodies,
	// keeping shapes, sizes and digests.
	RedactionTranscriptPII RedactionProfile = "transcript_pii"
	// RedactionFull keeps only hashes, event types and verdicts: argv,
	// parameter values and working-directory paths go too.
	RedactionFull RedactionProfile = "full"
)

// RedactionProfiles lists the closed set.
func RedactionProfiles() []RedactionProfile {
	return []RedactionProfile{RedactionNone, RedactionTranscriptPII, RedactionFull}
}

// EvidenceRef anchors a claim to an object or artifact.
type EvidenceRef struct {
	Kind   string `json:"kind"` // Recording, Artifact, Skill, SkillReplay, TerminalCommand, FilePatch
	Name   string `json:"name"`
	Digest string `json:"digest,omitempty"`
}

// Reproducibility records what produced the bundle.
type Reproducibility struct {
	WorkbenchVersion string            `json:"workbench_version"`
	ProtocolVersion  string            `json:"protocol_version"`
	BundleVersion    string            `json:"bundle_version"`
	Backends         []string          `json:"backends"`
	ImageDigests     map[string]string `json:"image_digests,omitempty"`
}

// Evidence is the bundle's evidence section.
type Evidence struct {
	Refs             []EvidenceRef    `json:"evidence_refs"`
	SecretKinds      []string         `json:"secret_kinds_detected"`
	RedactionProfile RedactionProfile `json:"redaction_profile"` // as the seed's EvidenceBundle writes it; equals the bundle's
	Reproducibility  Reproducibility  `json:"reproducibility"`
}

// Bundle is a SkillBundle in the seed's wire format (snake_case members, the
// seed's result names): one JSON document whose content_hash is sha256 over the
// RFC 8785 canonical form of the document without content_hash, signature and
// signed, computed after redaction. An unsigned bundle is bundle_version 0.1.0
// with "signature": null and "signed": false; a signed one (the seed's v0.2) is
// 0.2.0 with an Ed25519 signature over the 32 bytes of content_hash.
// docs/schemas/skill-bundle.schema.json is its JSON Schema.
type Bundle struct {
	BundleVersion    string           `json:"bundle_version"`
	BundleID         string           `json:"bundle_id"`
	SkillID          string           `json:"skill_id"`
	SkillVersion     int              `json:"skill_version"`
	CreatedAt        time.Time        `json:"created_at"`
	WorkbenchVersion string           `json:"workbench_version"`
	RedactionProfile RedactionProfile `json:"redaction_profile"`
	Manifest         Manifest         `json:"manifest"`
	Trace            Trace            `json:"interaction_trace"`
	Replay           *ReplayReport    `json:"replay_report,omitempty"`
	Proof            ProofResult      `json:"proof"`
	Evidence         Evidence         `json:"evidence"`
	ContentHash      string           `json:"content_hash,omitempty"`
	Signature        *Signature       `json:"signature"` // null unless signed (bundle_version 0.2.0)
	Signed           bool             `json:"signed"`    // true only with a signature, verified on import
}

// Bundle versions: unsigned (the seed's v0.1) and signed (v0.2).
const (
	BundleVersionSigned = "0.2.0"
	SignatureAlgEd25519 = "ed25519"
)

// Signature is a bundle's Ed25519 signature: Value is the standard base64 signature over
// the 32 raw bytes of content_hash, KeyID the sha256 of the raw public key (the
// ActionSigner model's key id), so a verifier finds the pinned key without trusting any
// key material inside the bundle.
type Signature struct {
	Alg   string `json:"alg"`
	KeyID string `json:"key_id"`
	Value string `json:"value"`
}

// ExportInput is what goes into a bundle.
type ExportInput struct {
	Manifest         *Manifest
	Trace            *Trace
	Replay           *ReplayReport
	Refs             []EvidenceRef
	WorkbenchVersion string
	ImageDigests     map[string]string
	Now              time.Time
}

// ExportOptions choose the redaction. An empty Profile takes the detector's
// pre-selection. Override allows RedactionNone although secrets were found.
type ExportOptions struct {
	Profile  RedactionProfile
	Override bool
}

// Scan lists the secret findings of a manifest, trace and replay (argv,
// outputs, patch text and contents, parameter values).
func Scan(m *Manifest, t *Trace, r *ReplayReport) []SecretFinding {
	var out []SecretFinding
	add := func(field, text string) {
		if text != "" {
			out = append(out, DetectSecrets(field, text)...)
		}
	}
	if t != nil {
		for i, e := range t.Edges {
			f := fmt.Sprintf("interaction_trace.edges[%d]", i)
			if c := e.Command; c != nil {
				add(f+".command.argv", strings.Join(c.Argv, " "))
				add(f+".command.cwd.path", c.Cwd.Path)
				if c.Output != nil {
					add(f+".command.output", *c.Output)
				}
			}
			if p := e.Patch; p != nil {
				if p.Patch != nil {
					add(f+".patch.patch", *p.Patch)
				}
				for j, op := range p.Operations {
					add(fmt.Sprintf("%s.patch.operations[%d].path", f, j), op.Path)
					if op.Content != nil {
						add(fmt.Sprintf("%s.patch.operations[%d].content", f, j), *op.Content)
					}
				}
			}
		}
	}
	if m != nil {
		for _, p := range m.Parameters {
			add("manifest.parameters."+p.Name, p.Default)
		}
		for i, s := range m.Steps {
			f := fmt.Sprintf("manifest.steps[%d]", i)
			if c := s.Command; c != nil {
				add(f+".command.argv", strings.Join(c.Argv, " "))
			}
			if p := s.Patch; p != nil {
				if p.Patch != nil {
					add(f+".patch.patch", *p.Patch)
				}
				for j, op := range p.Operations {
					if op.Content != nil {
						add(fmt.Sprintf("%s.patch.operations[%d].content", f, j), *op.Content)
					}
				}
			}
		}
	}
	if r != nil {
		for k, v := range r.Parameters {
			add("replay_report.input."+k, v)
		}
	}
	return out
}

func kinds(fs []SecretFinding) []string {
	m := map[string]bool{}
	for _, f := range fs {
		m[f.Kind] = true
	}
	return sortedKeys(m)
}

// PreselectProfile returns the profile an export takes when none is chosen: full when a
// finding sits outside an output or content body, transcript_pii otherwise — also when
// nothing was found, because a detector that found nothing proves nothing: none is never
// taken silently, only when asked for (seed 004 §7.5).
func PreselectProfile(findings []SecretFinding) RedactionProfile {
	for _, f := range findings {
		if !strings.HasSuffix(f.Field, ".output") && !strings.HasSuffix(f.Field, ".content") && !strings.HasSuffix(f.Field, ".patch.patch") {
			return RedactionFull
		}
	}
	return RedactionTranscriptPII
}

// Export builds a bundle: detect secrets, choose or check the redaction,
// redact, compute the proof from the redacted evidence, then the content hash
// (twice, by independent serializations). Refuses RedactionNone when a secret
// pattern is found unless opts.Override.
func Export(in ExportInput, opts ExportOptions) (*Bundle, error) {
	if in.Manifest == nil || in.Trace == nil {
		return nil, refuse(actuation.CodeBundleSchemaInvalid, "", "a bundle needs a manifest and a trace")
	}
	if in.Now.IsZero() {
		in.Now = time.Now().UTC()
	}
	findings := Scan(in.Manifest, in.Trace, in.Replay)
	profile, selection := opts.Profile, SelectionExplicit
	if profile == "" {
		profile, selection = PreselectProfile(findings), SelectionPreselected
	}
	if !slices.Contains(RedactionProfiles(), profile) {
		return nil, refuse(actuation.CodeBundleSchemaInvalid, "redaction_profile", "must be one of none, transcript_pii, full")
	}
	if profile == RedactionNone && len(findings) > 0 && !opts.Override {
		return nil, refuse(actuation.CodeSecretDetected, "redaction_profile",
			"must not be none: secret patterns found (%s in %s); choose %s or override", strings.Join(kinds(findings), ", "), findings[0].Field, PreselectProfile(findings))
	}
	b := &Bundle{
		BundleVersion: BundleVersion, BundleID: NewID(), SkillID: in.Manifest.SkillID, SkillVersion: in.Manifest.Version,
		CreatedAt: in.Now.Truncate(time.Second), WorkbenchVersion: in.WorkbenchVersion, RedactionProfile: profile,
	}
	// Deep copies through JSON so redaction never touches the caller's values.
	if err := roundTrip(in.Manifest, &b.Manifest); err != nil {
		return nil, err
	}
	if err := roundTrip(in.Trace, &b.Trace); err != nil {
		return nil, err
	}
	if in.Replay != nil {
		b.Replay = &ReplayReport{}
		if err := roundTrip(in.Replay, b.Replay); err != nil {
			return nil, err
		}
	}
	stripped := Redact(b, profile)
	remaining := Scan(&b.Manifest, &b.Trace, b.Replay)
	backends := map[string]bool{b.Trace.Backend: true}
	if b.Replay != nil {
		backends[b.Replay.Backend] = true
	}
	b.Evidence = Evidence{Refs: append([]EvidenceRef{}, in.Refs...), SecretKinds: kinds(findings),
		Reproducibility: Reproducibility{WorkbenchVersion: in.WorkbenchVersion, ProtocolVersion: ProtocolVersion,
			BundleVersion: BundleVersion, Backends: sortedKeys(backends), ImageDigests: in.ImageDigests}}
	if b.WorkbenchVersion == "" {
		b.WorkbenchVersion = "unknown"
		b.Evidence.Reproducibility.WorkbenchVersion = "unknown"
	}
	b.Evidence.RedactionProfile = profile
	red := RedactionResult{Profile: profile, Selection: selection, FieldsStripped: stripped, SecretsFoundBefore: kinds(findings),
		SecretsRemaining: kinds(remaining), Override: opts.Override && profile == RedactionNone && len(findings) > 0}
	// The evidence payload (no proof yet) must canonicalize identically two ways.
	reproducible := false
	if a, err := CanonicalTyped(b); err == nil {
		if raw, err := json.Marshal(b); err == nil {
			if g, err := CanonicalGeneric(raw); err == nil {
				reproducible = bytes.Equal(a, g)
			}
		}
	}
	red.PostRedactionHashMatches = reproducible
	b.Proof = ComputeProof(ProofEvidence{Manifest: &b.Manifest, Trace: &b.Trace, Replay: b.Replay, Redaction: &red,
		HashReproducible: &reproducible, Now: in.Now})
	h, err := ComputeHash(b)
	if err != nil {
		return nil, err
	}
	b.ContentHash = h
	if len(mustJSON(b)) > MaxBundleBytes {
		return nil, refuse(actuation.CodeBundleTooLarge, "", "a bundle must not exceed %d bytes", MaxBundleBytes)
	}
	return b, nil
}

// Redact applies profile to b in place and returns the stripped field paths
// (with [*] for lists).
func Redact(b *Bundle, profile RedactionProfile) []string {
	stripped := map[string]bool{}
	mark := func(f string) { stripped[f] = true }
	if profile == RedactionNone {
		return []string{}
	}
	for i := range b.Trace.Edges {
		e := &b.Trace.Edges[i]
		if c := e.Command; c != nil {
			if c.Output != nil {
				c.Output = nil
				mark("interaction_trace.edges[*].command.output")
			}
			if profile == RedactionFull {
				if c.Argv != nil {
					c.Argv = nil
					mark("interaction_trace.edges[*].command.argv")
				}
				if c.Cwd.Path != "" {
					c.Cwd.Path = ""
					mark("interaction_trace.edges[*].command.cwd.path")
				}
			}
		}
		if p := e.Patch; p != nil {
			if p.Patch != nil {
				p.Patch = nil
				mark("interaction_trace.edges[*].patch.patch")
			}
			for j := range p.Operations {
				if p.Operations[j].Content != nil {
					p.Operations[j].Content = nil
					mark("interaction_trace.edges[*].patch.operations[*].content")
				}
			}
		}
	}
	for i := range b.Manifest.Steps {
		s := &b.Manifest.Steps[i]
		if p := s.Patch; p != nil {
			if p.Patch != nil {
				p.Patch = nil
				mark("manifest.steps[*].patch.patch")
			}
			for j := range p.Operations {
				if p.Operations[j].Content != nil {
					p.Operations[j].Content = nil
					mark("manifest.steps[*].patch.operations[*].content")
				}
			}
		}
		if c := s.Command; c != nil && profile == RedactionFull {
			c.Argv = nil
			c.Cwd.Path = ""
			mark("manifest.steps[*].command.argv")
		}
	}
	if profile == RedactionFull {
		for i := range b.Manifest.Parameters {
			if b.Manifest.Parameters[i].Default != "" {
				b.Manifest.Parameters[i].Default = ""
				mark("manifest.parameters[*].default")
			}
		}
		if b.Replay != nil && len(b.Replay.Parameters) > 0 {
			b.Replay.Parameters = nil
			mark("replay_report.input")
		}
	}
	return sortedKeys(stripped)
}

// unhashed are the members the content hash does not cover: itself and the signature
// over it.
var unhashed = []string{"content_hash", "signature", "signed"}

// CanonicalTyped is the RFC 8785 form of b without content_hash, signature and
// signed, by way of the typed structure.
func CanonicalTyped(b *Bundle) ([]byte, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encoding bundle: %w", err)
	}
	return CanonicalGeneric(raw)
}

// CanonicalGeneric is the RFC 8785 form of a raw bundle document without its
// content_hash, signature and signed members, by way of a generic decoding (no
// typed structure).
func CanonicalGeneric(raw []byte) ([]byte, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("decoding bundle: %w", err)
	}
	for _, k := range unhashed {
		delete(doc, k)
	}
	re, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("re-encoding bundle: %w", err)
	}
	return jcs.Transform(re)
}

// ComputeHash returns "sha256:<hex>" of CanonicalTyped(b).
func ComputeHash(b *Bundle) (string, error) {
	c, err := CanonicalTyped(b)
	if err != nil {
		return "", err
	}
	return actuation.DigestBytes(c), nil
}

// Marshal renders a bundle as indented JSON (the file format; the hash does
// not depend on formatting).
func Marshal(b *Bundle) ([]byte, error) { return json.MarshalIndent(b, "", "  ") }

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func roundTrip(in, out any) error {
	raw, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("copying %T: %w", in, err)
	}
	return json.Unmarshal(raw, out)
}

// PinnedKey is an operator-pinned bundle signer (a BundleSigner): its name, the standard
// base64 of its 32-byte Ed25519 public key, and the key id derived from it.
type PinnedKey struct {
	Name      string
	PublicKey string
}

// ImportOptions say which signers an import trusts and whether it requires one.
type ImportOptions struct {
	Signers          []PinnedKey
	RequireSignature bool
}

// Imported is a verified bundle and, when signed, the pinned signer whose key verified it.
type Imported struct {
	Bundle   *Bundle
	SignedBy string // "" for an unsigned bundle ("signed": false)
}

// legacyKeys are top-level members of the camelCase bundles written before issue 30.
var legacyKeys = []string{"bundleVersion", "bundleId", "contentHash", "interactionTrace", "redactionProfile"}

// Import verifies a bundle document with no pinned signer: an unsigned bundle imports,
// a signed one is refused (its signature cannot be verified). See ImportWith.
func Import(raw []byte) (*Bundle, error) {
	im, err := ImportWith(raw, ImportOptions{})
	if err != nil {
		return nil, err
	}
	return im.Bundle, nil
}

// ImportWith verifies a bundle document and returns it as data. It checks the size cap,
// refuses a camelCase bundle of an earlier version (bundle-format-legacy: its keys and
// result names are not the seed's, and converting it would mean trusting a hash over a
// different document — re-export it) and a bundle without content_hash
// (bundle-hash-missing), decodes strictly (unknown members refused), validates the
// schema, recomputes the content hash over the document as received (generic decoding)
// and over its typed re-serialization — both must equal content_hash — and verifies a
// signature against the pinned keys (bundle-signer-unknown, bundle-signature-invalid).
// An unsigned bundle is refused when the options require a signature. Importing never
// runs, fetches or replays anything.
func ImportWith(raw []byte, opts ImportOptions) (*Imported, error) {
	if len(raw) > MaxBundleBytes {
		return nil, refuse(actuation.CodeBundleTooLarge, "", "a bundle must not exceed %d bytes (got %d)", MaxBundleBytes, len(raw))
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, refuse(actuation.CodeBundleSchemaInvalid, "", "must be one JSON object: %v", err)
	}
	for _, k := range legacyKeys {
		if _, ok := top[k]; ok {
			return nil, refuse(actuation.CodeBundleFormatLegacy, k, "is a camelCase member of a bundle written before the seed's wire format (snake_case, bundle_version %s): re-export the skill with this version", BundleVersion)
		}
	}
	if h, ok := top["content_hash"]; !ok || string(h) == `""` || string(h) == "null" {
		return nil, refuse(actuation.CodeBundleHashMissing, "content_hash", "is missing: a bundle without a content hash cannot be verified")
	}
	if err := ValidateSchema(raw); err != nil {
		return nil, err
	}
	var b Bundle
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return nil, refuse(actuation.CodeBundleSchemaInvalid, "", "must decode as a SkillBundle: %v", err)
	}
	if dec.More() {
		return nil, refuse(actuation.CodeBundleSchemaInvalid, "", "must hold exactly one JSON document")
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	generic, err := CanonicalGeneric(raw)
	if err != nil {
		return nil, refuse(actuation.CodeBundleSchemaInvalid, "", "must canonicalize: %v", err)
	}
	if got := actuation.DigestBytes(generic); got != b.ContentHash {
		return nil, refuse(actuation.CodeBundleHashMismatch, "content_hash", "must equal the sha256 of the canonical document: recorded %s, computed %s", b.ContentHash, got)
	}
	typed, err := CanonicalTyped(&b)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(typed, generic) {
		return nil, refuse(actuation.CodeBundleSchemaInvalid, "", "must be in normal form: its typed re-serialization differs from the document (explicit nulls or defaults where members are omitted)")
	}
	im := &Imported{Bundle: &b}
	if b.Signature == nil {
		if opts.RequireSignature {
			return nil, refuse(actuation.CodeBundleSignatureRequired, "signature", "is null (\"signed\": false) and this import requires a bundle signed by a pinned BundleSigner")
		}
		return im, nil
	}
	for _, k := range opts.Signers {
		pub, err := actions.ParsePublicKey(k.PublicKey)
		if err != nil || actions.KeyID(pub) != b.Signature.KeyID {
			continue
		}
		if err := actions.Verify(k.PublicKey, b.ContentHash, b.Signature.Value); err != nil {
			return nil, refuse(actuation.CodeBundleSignatureInvalid, "signature", "does not verify over content_hash with the key of BundleSigner %s: %v", k.Name, err)
		}
		im.SignedBy = k.Name
		return im, nil
	}
	return nil, refuse(actuation.CodeBundleSignerUnknown, "signature.key_id", "%s is not the key of any BundleSigner pinned for this namespace: the signature cannot be verified", b.Signature.KeyID)
}

// Sign signs an exported bundle with an Ed25519 private key: bundle_version becomes
// 0.2.0, the content hash is recomputed (the version is covered by it), and the signature
// over the hash's 32 bytes is attached with the key's id.
func Sign(b *Bundle, priv ed25519.PrivateKey) error {
	if len(priv) != ed25519.PrivateKeySize {
		return refuse(actuation.CodeBundleSignatureInvalid, "signature", "the signing key is not an Ed25519 private key")
	}
	b.BundleVersion = BundleVersionSigned
	b.Evidence.Reproducibility.BundleVersion = BundleVersionSigned
	h, err := ComputeHash(b)
	if err != nil {
		return err
	}
	b.ContentHash = h
	sig, err := actions.Sign(priv, h)
	if err != nil {
		return err
	}
	b.Signature = &Signature{Alg: SignatureAlgEd25519, KeyID: actions.KeyID(priv.Public().(ed25519.PublicKey)), Value: sig}
	b.Signed = true
	return nil
}

// Validate checks a bundle's schema: versions, identifiers, closed
// vocabularies, the manifest (as far as redaction left it), the trace shape,
// the proof's gates and the signature fields.
func (b *Bundle) Validate() error {
	bad := func(field, format string, args ...any) error {
		return refuse(actuation.CodeBundleSchemaInvalid, field, format, args...)
	}
	switch {
	case b.BundleVersion != BundleVersion && b.BundleVersion != BundleVersionSigned:
		return bad("bundle_version", "must be %q (unsigned) or %q (signed)", BundleVersion, BundleVersionSigned)
	case b.Evidence.Reproducibility.BundleVersion != b.BundleVersion:
		return bad("evidence.reproducibility.bundle_version", "must equal bundle_version")
	case b.Evidence.RedactionProfile != b.RedactionProfile:
		return bad("evidence.redaction_profile", "must equal redaction_profile")
	case !IsUUIDv7(b.BundleID):
		return bad("bundle_id", "must be a UUIDv7")
	case b.SkillID != b.Manifest.SkillID:
		return bad("skill_id", "must equal manifest.skill_id")
	case b.SkillVersion != b.Manifest.Version:
		return bad("skill_version", "must equal manifest.version")
	case !slices.Contains(RedactionProfiles(), b.RedactionProfile):
		return bad("redaction_profile", "must be none, transcript_pii or full")
	case !actuation.IsDigest(b.ContentHash):
		return bad("content_hash", "must be sha256:<64 lowercase hex>")
	case b.BundleVersion == BundleVersion && (b.Signature != nil || b.Signed):
		return bad("signature", "must be null and signed false in an unsigned (%s) bundle", BundleVersion)
	case b.BundleVersion == BundleVersionSigned && (b.Signature == nil || !b.Signed):
		return bad("signature", "must be present with signed true in a signed (%s) bundle", BundleVersionSigned)
	case b.Signature != nil && (b.Signature.Alg != SignatureAlgEd25519 || !actuation.IsDigest(b.Signature.KeyID) || len(b.Signature.Value) != 88):
		return bad("signature", "must be {alg: ed25519, key_id: sha256:<hex>, value: base64 of 64 bytes}")
	case b.WorkbenchVersion == "":
		return bad("workbench_version", "must be set")
	case b.Trace.TraceID != b.Manifest.DerivedFromTraceID:
		return bad("interaction_trace.trace_id", "must equal manifest.derived_from_trace_id")
	}
	if err := b.Manifest.validate(b.RedactionProfile == RedactionFull); err != nil {
		return bad("manifest", "%v", err)
	}
	if probs := b.Trace.Problems(); len(probs) > 0 {
		return bad("interaction_trace", "%s", strings.Join(first(probs, 4), "; "))
	}
	if b.Replay != nil {
		r := b.Replay
		if !IsUUIDv7(r.ReplayID) || r.SkillID != b.SkillID {
			return bad("replay_report", "must carry a UUIDv7 replay_id and the bundle's skill_id")
		}
		if !slices.Contains([]Fidelity{FidelityExact, FidelityStructural, FidelitySemantic, FidelityFailed, FidelityInconclusive}, r.Fidelity) {
			return bad("replay_report.fidelity", "must be one of the five fidelity levels")
		}
	}
	p := b.Proof
	if p.Schema != ProofSchema {
		return bad("proof.schema", "must be %q", ProofSchema)
	}
	if !slices.Contains([]Verdict{VerdictPass, VerdictPartial, VerdictFail, VerdictInconclusive}, p.OverallVerdict) {
		return bad("proof.overall_verdict", "must be pass, partial, fail or inconclusive")
	}
	ids := make([]string, 0, len(p.Gates))
	for _, g := range p.Gates {
		ids = append(ids, g.ID)
		if !slices.Contains([]Verdict{VerdictPass, VerdictFail, VerdictInconclusive, VerdictNA}, g.Verdict) {
			return bad("proof.proof_gates", "gate %s has verdict %q", g.ID, g.Verdict)
		}
	}
	if !slices.Equal(ids, GateIDs()) {
		return bad("proof.proof_gates", "must list the six gates in order, got %v", ids)
	}
	if p.Redaction.Profile != b.RedactionProfile {
		return bad("proof.redaction_result.profile", "must equal redaction_profile")
	}
	return nil
}

package skills

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gowebpki/jcs"

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
	WorkbenchVersion string            `json:"workbenchVersion"`
	ProtocolVersion  string            `json:"protocolVersion"`
	BundleVersion    string            `json:"bundleVersion"`
	Backends         []string          `json:"backends"`
	ImageDigests     map[string]string `json:"imageDigests,omitempty"`
}

// Evidence is the bundle's evidence section.
type Evidence struct {
	Refs            []EvidenceRef   `json:"evidenceRefs"`
	SecretKinds     []string        `json:"secretKindsDetected"`
	Reproducibility Reproducibility `json:"reproducibility"`
}

// Bundle is a SkillBundle: one JSON document whose ContentHash is sha256
// over the RFC 8785 canonical form of the document without contentHash,
// computed after redaction.
type Bundle struct {
	BundleVersion    string           `json:"bundleVersion"`
	BundleID         string           `json:"bundleId"`
	SkillID          string           `json:"skillId"`
	SkillVersion     int              `json:"skillVersion"`
	CreatedAt        time.Time        `json:"createdAt"`
	WorkbenchVersion string           `json:"workbenchVersion"`
	RedactionProfile RedactionProfile `json:"redactionProfile"`
	Manifest         Manifest         `json:"manifest"`
	Trace            Trace            `json:"interactionTrace"`
	Replay           *ReplayReport    `json:"replayReport,omitempty"`
	Proof            ProofResult      `json:"proof"`
	Evidence         Evidence         `json:"evidence"`
	ContentHash      string           `json:"contentHash,omitempty"`
	Signature        *string          `json:"signature"` // always null: bundles are not signed in this version
	Signed           bool             `json:"signed"`
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
			f := fmt.Sprintf("interactionTrace.edges[%d]", i)
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
			add("replayReport.parameters."+k, v)
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

// PreselectProfile returns the weakest profile that leaves none of the
// findings in the bundle: none without findings, transcript_pii when every
// finding is in an output or content body, full otherwise.
func PreselectProfile(findings []SecretFinding) RedactionProfile {
	if len(findings) == 0 {
		return RedactionNone
	}
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
	profile := opts.Profile
	if profile == "" {
		profile = PreselectProfile(findings)
	}
	if !slices.Contains(RedactionProfiles(), profile) {
		return nil, refuse(actuation.CodeBundleSchemaInvalid, "redactionProfile", "must be one of none, transcript_pii, full")
	}
	if profile == RedactionNone && len(findings) > 0 && !opts.Override {
		return nil, refuse(actuation.CodeSecretDetected, "redactionProfile",
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
	red := RedactionResult{Profile: profile, FieldsStripped: stripped, SecretsFoundBefore: kinds(findings),
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
				mark("interactionTrace.edges[*].command.output")
			}
			if profile == RedactionFull {
				if c.Argv != nil {
					c.Argv = nil
					mark("interactionTrace.edges[*].command.argv")
				}
				if c.Cwd.Path != "" {
					c.Cwd.Path = ""
					mark("interactionTrace.edges[*].command.cwd.path")
				}
			}
		}
		if p := e.Patch; p != nil {
			if p.Patch != nil {
				p.Patch = nil
				mark("interactionTrace.edges[*].patch.patch")
			}
			for j := range p.Operations {
				if p.Operations[j].Content != nil {
					p.Operations[j].Content = nil
					mark("interactionTrace.edges[*].patch.operations[*].content")
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
			mark("replayReport.parameters")
		}
	}
	return sortedKeys(stripped)
}

// CanonicalTyped is the RFC 8785 form of b without its contentHash, by way
// of the typed structure.
func CanonicalTyped(b *Bundle) ([]byte, error) {
	c := *b
	c.ContentHash = ""
	return actuation.CanonicalJSON(&c)
}

// CanonicalGeneric is the RFC 8785 form of a raw bundle document without its
// contentHash member, by way of a generic decoding (no typed structure).
func CanonicalGeneric(raw []byte) ([]byte, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("decoding bundle: %w", err)
	}
	delete(doc, "contentHash")
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
	return hashBytes(c), nil
}

func hashBytes(b []byte) string {
	s := sha256.Sum256(b)
	return actuation.DigestPrefix + hex.EncodeToString(s[:])
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

// Import verifies a bundle document and returns it as data. It checks the
// size cap, decodes strictly (unknown fields refused), validates the schema,
// and recomputes the content hash over the document as received (generic
// decoding) and over its typed re-serialization: both must equal
// contentHash. Importing never runs, fetches or replays anything.
func Import(raw []byte) (*Bundle, error) {
	if len(raw) > MaxBundleBytes {
		return nil, refuse(actuation.CodeBundleTooLarge, "", "a bundle must not exceed %d bytes (got %d)", MaxBundleBytes, len(raw))
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
	if got := hashBytes(generic); got != b.ContentHash {
		return nil, refuse(actuation.CodeBundleHashMismatch, "contentHash", "must equal the sha256 of the canonical document: recorded %s, computed %s", b.ContentHash, got)
	}
	typed, err := CanonicalTyped(&b)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(typed, generic) {
		return nil, refuse(actuation.CodeBundleSchemaInvalid, "", "must be in normal form: its typed re-serialization differs from the document (explicit nulls or defaults where members are omitted)")
	}
	return &b, nil
}

// Validate checks a bundle's schema: versions, identifiers, closed
// vocabularies, the manifest (as far as redaction left it), the trace shape,
// the proof's gates and the signature fields.
func (b *Bundle) Validate() error {
	bad := func(field, format string, args ...any) error {
		return refuse(actuation.CodeBundleSchemaInvalid, field, format, args...)
	}
	switch {
	case b.BundleVersion != BundleVersion:
		return bad("bundleVersion", "must be %q", BundleVersion)
	case !IsUUIDv7(b.BundleID):
		return bad("bundleId", "must be a UUIDv7")
	case b.SkillID != b.Manifest.SkillID:
		return bad("skillId", "must equal manifest.skillId")
	case b.SkillVersion != b.Manifest.Version:
		return bad("skillVersion", "must equal manifest.version")
	case !slices.Contains(RedactionProfiles(), b.RedactionProfile):
		return bad("redactionProfile", "must be none, transcript_pii or full")
	case !actuation.IsDigest(b.ContentHash):
		return bad("contentHash", "must be sha256:<64 lowercase hex>")
	case b.Signature != nil || b.Signed:
		return bad("signature", "must be null and signed false: this version does not sign bundles")
	case b.WorkbenchVersion == "":
		return bad("workbenchVersion", "must be set")
	case b.Trace.TraceID != b.Manifest.DerivedFromTraceID:
		return bad("interactionTrace.traceId", "must equal manifest.derivedFromTraceId")
	}
	if err := b.Manifest.validate(b.RedactionProfile == RedactionFull); err != nil {
		return bad("manifest", "%v", err)
	}
	if probs := b.Trace.Problems(); len(probs) > 0 {
		return bad("interactionTrace", "%s", strings.Join(first(probs, 4), "; "))
	}
	if b.Replay != nil {
		r := b.Replay
		if !IsUUIDv7(r.ReplayID) || r.SkillID != b.SkillID {
			return bad("replayReport", "must carry a UUIDv7 replayId and the bundle's skillId")
		}
		if !slices.Contains([]Fidelity{FidelityExact, FidelityStructural, FidelitySemantic, FidelityFailed, FidelityInconclusive}, r.Fidelity) {
			return bad("replayReport.fidelity", "must be one of the five fidelity levels")
		}
	}
	p := b.Proof
	if p.Schema != ProofSchema {
		return bad("proof.schema", "must be %q", ProofSchema)
	}
	if !slices.Contains([]Verdict{VerdictPass, VerdictPartial, VerdictFail, VerdictInconclusive}, p.OverallVerdict) {
		return bad("proof.overallVerdict", "must be pass, partial, fail or inconclusive")
	}
	ids := make([]string, 0, len(p.Gates))
	for _, g := range p.Gates {
		ids = append(ids, g.ID)
		if !slices.Contains([]Verdict{VerdictPass, VerdictFail, VerdictInconclusive, VerdictNA}, g.Verdict) {
			return bad("proof.proofGates", "gate %s has verdict %q", g.ID, g.Verdict)
		}
	}
	if !slices.Equal(ids, GateIDs()) {
		return bad("proof.proofGates", "must list the six gates in order, got %v", ids)
	}
	if p.Redaction.Profile != b.RedactionProfile {
		return bad("proof.redactionResult.profile", "must equal redactionProfile")
	}
	return nil
}

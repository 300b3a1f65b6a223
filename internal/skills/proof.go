package skills

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Verdicts of a gate and of the proof.
type Verdict string

const (
	VerdictPass         Verdict = "pass"
	VerdictPartial      Verdict = "partial" // overall only
	VerdictFail         Verdict = "fail"
	VerdictInconclusive Verdict = "inconclusive"
	VerdictNA           Verdict = "n/a" // gates only: the gate does not apply
)

// Gate ids (seed 004 §5.4).
const (
	GateAuthority          = "gate.authority"
	GateTraceCompleteness  = "gate.trace_completeness"
	GateReplayFidelity     = "gate.replay_fidelity"
	GateRedactionVerify    = "gate.redaction_verify"
	GateContentHash        = "gate.content_hash"
	GateNoHiddenCapability = "gate.no_hidden_capability"
)

// GateIDs lists the six gates in their fixed order.
func GateIDs() []string {
	return []string{GateAuthority, GateTraceCompleteness, GateReplayFidelity, GateRedactionVerify, GateContentHash, GateNoHiddenCapability}
}

// Invariant ids.
const (
	InvEveryActionAuthorized       = "inv.every_action_authorized"
	InvStateHashPerEdge            = "inv.state_hash_per_edge"
	InvBundleHashReproducible      = "inv.bundle_hash_reproducible"
	InvRedactedBundleStillVerifies = "inv.redacted_bundle_still_verifies"
)

// GateResult is one gate's verdict with the evidence it rests on.
type GateResult struct {
	ID          string  `json:"id"`
	Verdict     Verdict `json:"verdict"`
	EvidenceRef string  `json:"evidence_ref,omitempty"`
	Level       string  `json:"level,omitempty"`
	Reason      string  `json:"reason"`
}

// InvariantResult is one invariant; Held is "true", "false" or "n/a" (on the wire, as
// the seed writes it: true, false or "n/a").
type InvariantResult struct {
	ID       string `json:"id"`
	Held     Held   `json:"held"`
	CheckedN int    `json:"checked_n"`
}

// Held is an invariant's outcome.
type Held string

// MarshalJSON writes true, false or "n/a".
func (h Held) MarshalJSON() ([]byte, error) {
	switch h {
	case "true", "false":
		return []byte(h), nil
	case "n/a":
		return []byte(`"n/a"`), nil
	}
	return nil, fmt.Errorf("invariant outcome %q is not true, false or n/a", string(h))
}

// UnmarshalJSON reads true, false or "n/a".
func (h *Held) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true", "false":
		*h = Held(b)
	case `"n/a"`:
		*h = "n/a"
	default:
		return fmt.Errorf("invariant outcome %s is not true, false or \"n/a\"", b)
	}
	return nil
}

// AuthorityResult summarizes authorizations and denials.
type AuthorityResult struct {
	Decision string   `json:"decision"` // allow | deny | none
	Denials  []Denial `json:"denials"`
	// Authorizations are the distinct refs that admitted edges.
	Authorizations []string `json:"authorizations"`
}

// RedactionResult says what redaction did and whether the result verifies.
type RedactionResult struct {
	Profile                  RedactionProfile `json:"profile"`
	Selection                string           `json:"selection"` // explicit (the exporter chose it) or preselected (the detector did)
	FieldsStripped           []string         `json:"fields_stripped"`
	SecretsFoundBefore       []string         `json:"secrets_found_before"` // kinds, never values
	SecretsRemaining         []string         `json:"secrets_remaining"`
	PostRedactionHashMatches bool             `json:"post_redaction_hash_matches"`
	Override                 bool             `json:"override,omitempty"`
}

// Redaction selections.
const (
	SelectionExplicit    = "explicit"
	SelectionPreselected = "preselected"
)

// ReplayResult is the replay summary inside a proof.
type ReplayResult struct {
	Status         string   `json:"status"`
	FidelityLevel  Fidelity `json:"fidelity_level"`
	EdgesAttempted int      `json:"edges_attempted"`
	EdgesCommitted int      `json:"edges_committed"`
}

// ProofResult is the verdict on a bundle's evidence (seed 004 §5.4).
type ProofResult struct {
	Schema          string            `json:"schema"`
	VerifierVersion string            `json:"verifier_version"`
	ComputedAt      time.Time         `json:"computed_at"`
	OverallVerdict  Verdict           `json:"overall_verdict"`
	Gates           []GateResult      `json:"proof_gates"`
	Invariants      []InvariantResult `json:"invariant_results"`
	Authority       AuthorityResult   `json:"authority_result"`
	Redaction       RedactionResult   `json:"redaction_result"`
	Replay          *ReplayResult     `json:"replay_result,omitempty"`
	Conformance     ConformanceCheck  `json:"conformance_check"`
}

// Canonical fixture ids (seed 004 §8.4).
const (
	FixtureBasic           = "skill.basic_prompt_to_manifest"
	FixtureReplayFidelity  = "skill.replay_fidelity"
	FixtureAuthorityDenied = "skill.authority_denied"
	FixtureRedactedExport  = "skill.redacted_export"
	FixtureModelComparison = "skill.model_comparison"
	ConformanceSpecVersion = "0.1"
)

// ConformanceCheck lists the canonical fixtures this bundle's evidence demonstrates
// (passed) or claims and fails (failed). A fixture the evidence does not exercise is in
// neither list: skill.model_comparison needs two proofs side by side and never appears in
// one bundle's proof.
type ConformanceCheck struct {
	SpecVersion    string   `json:"spec_version"`
	FixturesPassed []string `json:"fixtures_passed"`
	FixturesFailed []string `json:"fixtures_failed"`
}

// conformance judges the fixtures the evidence exercises from the proof just computed:
// basic (a trace with at least one edge and a manifest with steps), replay fidelity (a
// replay: success, exact or structural, gate passed), authority denied (denials present:
// the overall verdict must be fail), redacted export (a profile other than none: the
// redaction gate passes and the post-redaction hash verifies).
func conformance(ev ProofEvidence, p *ProofResult) ConformanceCheck {
	c := ConformanceCheck{SpecVersion: ConformanceSpecVersion, FixturesPassed: []string{}, FixturesFailed: []string{}}
	judge := func(id string, ok bool) {
		if ok {
			c.FixturesPassed = append(c.FixturesPassed, id)
		} else {
			c.FixturesFailed = append(c.FixturesFailed, id)
		}
	}
	if ev.Trace != nil && ev.Manifest != nil {
		judge(FixtureBasic, len(ev.Trace.Edges) >= 1 && ev.Manifest.Name != "" && len(ev.Manifest.Steps) >= 1 &&
			p.Gate(GateTraceCompleteness).Verdict == VerdictPass)
	}
	if r := ev.Replay; r != nil && len(p.Authority.Denials) == 0 {
		judge(FixtureReplayFidelity, r.Status == StatusSuccess && (r.Fidelity == FidelityExact || r.Fidelity == FidelityStructural) &&
			p.Gate(GateReplayFidelity).Verdict == VerdictPass && p.OverallVerdict == VerdictPass)
	}
	if len(p.Authority.Denials) > 0 {
		judge(FixtureAuthorityDenied, p.OverallVerdict == VerdictFail)
	}
	if p.Redaction.Profile != RedactionNone {
		judge(FixtureRedactedExport, p.Gate(GateRedactionVerify).Verdict == VerdictPass && p.Redaction.PostRedactionHashMatches)
	}
	return c
}

// Gate returns the result of gate id (zero value when absent).
func (p *ProofResult) Gate(id string) GateResult {
	for _, g := range p.Gates {
		if g.ID == id {
			return g
		}
	}
	return GateResult{}
}

// ProofEvidence is everything a proof may look at.
type ProofEvidence struct {
	Manifest *Manifest
	Trace    *Trace
	Replay   *ReplayReport // nil: no replay evidence
	// Redaction is the export's redaction result (PostRedactionHashMatches is
	// evaluated by the caller after hashing); nil outside an export.
	Redaction *RedactionResult
	// HashReproducible: the canonical form reproduced byte for byte across two
	// independent serializations; nil when not checked.
	HashReproducible *bool
	Now              time.Time
}

// ComputeProof derives gates, invariants and the overall verdict from the
// evidence only. The overall verdict is fail when any gate fails or any
// invariant does not hold; inconclusive when the trace or the content hash
// is not established; pass only when every gate passes or does not apply;
// partial otherwise (some claim, such as replay fidelity, unproven). It is
// never rounded up.
func ComputeProof(ev ProofEvidence) ProofResult {
	if ev.Now.IsZero() {
		ev.Now = time.Now().UTC()
	}
	p := ProofResult{Schema: ProofSchema, VerifierVersion: VerifierVersion, ComputedAt: ev.Now.Truncate(time.Second),
		Authority: AuthorityResult{Denials: []Denial{}, Authorizations: []string{}}}
	var traceID, replayID string
	if ev.Trace != nil {
		traceID = ev.Trace.TraceID
	}
	if ev.Replay != nil {
		replayID = ev.Replay.ReplayID
	}

	// gate.authority and inv.every_action_authorized: every executed edge
	// (recorded and replayed) carries the authorization that admitted it.
	executed, authorized := 0, 0
	auths := map[string]bool{}
	count := func(a Authorization) {
		executed++
		if a.Kind != "" && a.Ref != "" {
			authorized++
			auths[string(a.Kind)+":"+a.Ref] = true
		}
	}
	if ev.Trace != nil {
		for _, e := range ev.Trace.Edges {
			if e.Outcome.Phase != "Refused" {
				count(e.Authorization)
			}
		}
	}
	if ev.Replay != nil {
		for _, e := range ev.Replay.Edges {
			if e.Match != MatchRefused {
				count(e.Authorization)
			}
		}
		p.Authority.Denials = append(p.Authority.Denials, ev.Replay.Denials...)
		for _, e := range ev.Replay.Edges {
			if e.Match == MatchRefused {
				p.Authority.Denials = append(p.Authority.Denials, Denial{Edge: e.Seq, Code: e.Outcome.Code, Message: "refused at admission"})
			}
		}
	}
	p.Authority.Authorizations = sortedKeys(auths)
	switch {
	case len(p.Authority.Denials) > 0:
		p.Authority.Decision = "deny"
	case executed > 0:
		p.Authority.Decision = "allow"
	default:
		p.Authority.Decision = "none"
	}
	authGate := GateResult{ID: GateAuthority, EvidenceRef: "trace.edges[].authorization"}
	switch {
	case ev.Trace == nil:
		authGate.Verdict, authGate.Reason = VerdictInconclusive, "no trace"
	case authorized == executed && executed > 0:
		authGate.Verdict, authGate.Reason = VerdictPass, fmt.Sprintf("%d executed edges, each with its admitting authorization", executed)
	case executed == 0:
		authGate.Verdict, authGate.Reason = VerdictInconclusive, "no executed edge"
	default:
		authGate.Verdict, authGate.Reason = VerdictFail, fmt.Sprintf("%d of %d executed edges carry no authorization", executed-authorized, executed)
	}
	p.Gates = append(p.Gates, authGate)
	p.Invariants = append(p.Invariants, InvariantResult{ID: InvEveryActionAuthorized, Held: held(executed > 0, authorized == executed), CheckedN: executed})

	// gate.trace_completeness and inv.state_hash_per_edge.
	tc := GateResult{ID: GateTraceCompleteness, EvidenceRef: "trace.trace_id " + traceID}
	hashed := 0
	if ev.Trace == nil {
		tc.Verdict, tc.Reason = VerdictInconclusive, "no trace"
	} else {
		for _, e := range ev.Trace.Edges {
			if isDigest(e.StateBefore) && isDigest(e.StateAfter) {
				hashed++
			}
		}
		probs := ev.Trace.Problems()
		switch {
		case len(ev.Trace.Edges) == 0:
			tc.Verdict, tc.Reason = VerdictFail, "the trace holds no edge"
		case len(probs) > 0:
			tc.Verdict, tc.Reason = VerdictFail, strings.Join(first(probs, 4), "; ")
		default:
			tc.Verdict, tc.Reason = VerdictPass, fmt.Sprintf("%d edges, contiguous, each with state hashes before and after", len(ev.Trace.Edges))
		}
	}
	p.Gates = append(p.Gates, tc)
	n := 0
	if ev.Trace != nil {
		n = len(ev.Trace.Edges)
	}
	p.Invariants = append(p.Invariants, InvariantResult{ID: InvStateHashPerEdge, Held: held(n > 0, hashed == n), CheckedN: n})

	// gate.replay_fidelity.
	rf := GateResult{ID: GateReplayFidelity, EvidenceRef: "replay_report.replay_id " + replayID}
	if ev.Replay == nil {
		rf.Verdict, rf.Reason = VerdictInconclusive, "no replay evidence: the skill has not been replayed"
	} else {
		r := ev.Replay
		p.Replay = &ReplayResult{Status: r.StatusString(), FidelityLevel: r.Fidelity, EdgesAttempted: r.EdgesAttempted, EdgesCommitted: r.EdgesCommitted}
		rf.Level = string(r.Fidelity)
		switch {
		case r.Status == StatusSuccess && (r.Fidelity == FidelityExact || r.Fidelity == FidelityStructural):
			rf.Verdict, rf.Reason = VerdictPass, fmt.Sprintf("%d of %d edges committed, fidelity %s", r.EdgesCommitted, r.EdgesAttempted, r.Fidelity)
		case r.Status == StatusCompletedWithSurprises:
			rf.Verdict, rf.Reason = VerdictInconclusive, fmt.Sprintf("completed with %d surprises", len(r.Surprises))
		case r.Status == StatusHalted || r.Fidelity == FidelityFailed:
			rf.Verdict, rf.Reason = VerdictFail, r.StatusString()
		default:
			rf.Verdict, rf.Reason = VerdictInconclusive, fmt.Sprintf("replay %s, fidelity %s", r.StatusString(), r.Fidelity)
		}
	}
	p.Gates = append(p.Gates, rf)

	// gate.redaction_verify and inv.redacted_bundle_still_verifies.
	rv := GateResult{ID: GateRedactionVerify, EvidenceRef: "proof.redaction_result"}
	red := RedactionResult{Profile: RedactionNone, Selection: SelectionExplicit, FieldsStripped: []string{}, SecretsFoundBefore: []string{}, SecretsRemaining: []string{}, PostRedactionHashMatches: true}
	if ev.Redaction != nil {
		red = *ev.Redaction
	}
	p.Redaction = red
	switch {
	case red.Profile == RedactionNone && len(red.SecretsFoundBefore) == 0:
		rv.Verdict, rv.Reason = VerdictNA, "redaction profile none, no secret pattern found"
		p.Invariants = append(p.Invariants, InvariantResult{ID: InvRedactedBundleStillVerifies, Held: "n/a"})
	case red.Profile == RedactionNone:
		rv.Verdict, rv.Reason = VerdictFail, "secret patterns exported unredacted by operator override: "+strings.Join(red.SecretsFoundBefore, ", ")
		p.Invariants = append(p.Invariants, InvariantResult{ID: InvRedactedBundleStillVerifies, Held: "n/a"})
	default:
		ok := len(red.SecretsRemaining) == 0 && red.PostRedactionHashMatches
		rv.Verdict, rv.Reason = VerdictPass, fmt.Sprintf("profile %s stripped %d fields; no secret pattern remains", red.Profile, len(red.FieldsStripped))
		if len(red.SecretsRemaining) > 0 {
			rv.Verdict, rv.Reason = VerdictFail, "secret patterns remain after redaction: "+strings.Join(red.SecretsRemaining, ", ")
		}
		p.Invariants = append(p.Invariants, InvariantResult{ID: InvRedactedBundleStillVerifies, Held: held(true, ok), CheckedN: 1})
	}
	p.Gates = append(p.Gates, rv)

	// gate.content_hash and inv.bundle_hash_reproducible.
	ch := GateResult{ID: GateContentHash, EvidenceRef: "content_hash"}
	switch {
	case ev.HashReproducible == nil:
		ch.Verdict, ch.Reason = VerdictInconclusive, "no bundle: the content hash was not computed"
		p.Invariants = append(p.Invariants, InvariantResult{ID: InvBundleHashReproducible, Held: "n/a"})
	case *ev.HashReproducible:
		ch.Verdict, ch.Reason = VerdictPass, "the RFC 8785 canonical form reproduced byte for byte across two independent serializations"
		p.Invariants = append(p.Invariants, InvariantResult{ID: InvBundleHashReproducible, Held: "true", CheckedN: 2})
	default:
		ch.Verdict, ch.Reason = VerdictFail, "two serializations gave different canonical forms"
		p.Invariants = append(p.Invariants, InvariantResult{ID: InvBundleHashReproducible, Held: "false", CheckedN: 2})
	}
	p.Gates = append(p.Gates, ch)

	// gate.no_hidden_capability: everything used is declared.
	nh := GateResult{ID: GateNoHiddenCapability, EvidenceRef: "manifest.capabilities"}
	if ev.Manifest == nil {
		nh.Verdict, nh.Reason = VerdictInconclusive, "no manifest"
	} else if hidden := hiddenCapabilities(ev); len(hidden) > 0 {
		nh.Verdict, nh.Reason = VerdictFail, "undeclared: "+strings.Join(hidden, ", ")
	} else {
		nh.Verdict, nh.Reason = VerdictPass, "every profile and backend used is declared in the manifest"
	}
	p.Gates = append(p.Gates, nh)

	p.OverallVerdict = overall(p)
	p.Conformance = conformance(ev, &p)
	return p
}

func hiddenCapabilities(ev ProofEvidence) []string {
	caps := ev.Manifest.Capabilities
	hidden := map[string]bool{}
	check := func(kind, v string, declared []string) {
		if v != "" && !slices.Contains(declared, v) {
			hidden[kind+" "+v] = true
		}
	}
	if ev.Trace != nil {
		for _, e := range ev.Trace.Edges {
			if e.Outcome.Phase == "Refused" {
				continue
			}
			check("backend", e.Backend, caps.Backends)
			if e.Command != nil {
				check("profile", e.Command.Profile, caps.Profiles)
			}
		}
	}
	if ev.Replay != nil {
		if len(ev.Replay.Edges) > 0 || len(ev.Replay.Denials) > 0 {
			check("backend", ev.Replay.Backend, caps.Backends)
		}
		for _, e := range ev.Replay.Edges {
			check("profile", e.Profile, caps.Profiles)
		}
		for _, d := range ev.Replay.Denials {
			if d.Code == "capability-undeclared" {
				hidden[fmt.Sprintf("step %d: %s", d.Edge, d.Message)] = true
			}
		}
		// Steps the replay needs, whether or not it reached them.
		for _, s := range ev.Manifest.Steps {
			if s.Command != nil {
				check("profile", s.Command.Profile, caps.Profiles)
			}
		}
	}
	return sortedKeys(hidden)
}

func overall(p ProofResult) Verdict {
	for _, g := range p.Gates {
		if g.Verdict == VerdictFail {
			return VerdictFail
		}
	}
	for _, inv := range p.Invariants {
		if inv.Held == "false" {
			return VerdictFail
		}
	}
	if g := p.Gate(GateTraceCompleteness); g.Verdict != VerdictPass {
		return VerdictInconclusive
	}
	if g := p.Gate(GateContentHash); g.Verdict != VerdictPass {
		return VerdictInconclusive
	}
	for _, g := range p.Gates {
		if g.Verdict != VerdictPass && g.Verdict != VerdictNA {
			return VerdictPartial
		}
	}
	return VerdictPass
}

func held(applies, ok bool) Held {
	switch {
	case !applies:
		return "n/a"
	case ok:
		return "true"
	default:
		return "false"
	}
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

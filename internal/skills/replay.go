package skills

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/treehash"
)

// ReplayMode says what a state-hash mismatch does.
type ReplayMode string

const (
	// ModeExact halts at the first state-hash mismatch (before or after an edge).
	ModeExact ReplayMode = "exact"
	// ModeStructural halts when an edge's own effect (outcome, changed paths and
	// their contents where comparable) diverges; a whole-tree hash mismatch
	// whose edge effect matches is recorded as a surprise and replay goes on.
	ModeStructural ReplayMode = "structural"
)

// Fidelity levels (seed 004 §5.5). Semantic needs a judge and is never
// assigned here: it is reported unavailable.
type Fidelity string

const (
	FidelityExact        Fidelity = "exact"
	FidelityStructural   Fidelity = "structural"
	FidelitySemantic     Fidelity = "semantic"
	FidelityFailed       Fidelity = "failed"
	FidelityInconclusive Fidelity = "inconclusive"
)

// ReplayStatus is the replay's result.
type ReplayStatus string

const (
	StatusSuccess                ReplayStatus = "success"
	StatusHalted                 ReplayStatus = "halted" // halted_at_edge_N on the wire
	StatusCompletedWithSurprises ReplayStatus = "completed_with_surprises"
	StatusRunning                ReplayStatus = "running"
)

// Match is how one replayed edge compares with its step.
type Match string

const (
	MatchExact      Match = "exact"      // state after equals the recorded digest
	MatchStructural Match = "structural" // the edge's effect matches; whole-tree digests not comparable or differing
	MatchDiverged   Match = "diverged"   // the effect differs: replay halts
	MatchRefused    Match = "refused"    // the step was refused (admission, consent or undeclared capability)
)

// Surprise kinds.
const (
	SurpriseStateBefore = "state-before-mismatch"
	SurpriseStateAfter  = "state-after-mismatch"
	SurpriseOutcome     = "outcome-mismatch"
	SurpriseEffect      = "effect-mismatch"
	SurpriseRefused     = "refused"
)

// PathDifference is one path whose observed state differs from the expected one.
type PathDifference struct {
	Path     string     `json:"path"`
	Expected *PathState `json:"expected,omitempty"`
	Observed *PathState `json:"observed,omitempty"`
}

// MaxDifferences bounds the per-path differences of one surprise.
const MaxDifferences = 64

// SurpriseSignal reports a divergence at an edge (OS-011 §5.4).
type SurpriseSignal struct {
	Edge         int              `json:"edge"`
	Kind         string           `json:"kind"`
	ExpectedHash string           `json:"expected_hash,omitempty"`
	ObservedHash string           `json:"observed_hash,omitempty"`
	Differences  []PathDifference `json:"differences,omitempty"`
	// DifferencesTruncated is set when more than MaxDifferences paths differ.
	DifferencesTruncated bool   `json:"differences_truncated,omitempty"`
	Message              string `json:"message,omitempty"`
	Halted               bool   `json:"halted"`
}

// Denial is a replay step refused before or at admission.
type Denial struct {
	Edge    int    `json:"edge"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ReplayEdge is the record of one replayed step.
type ReplayEdge struct {
	Seq           int           `json:"seq"`
	Object        string        `json:"object,omitempty"`
	Backend       string        `json:"backend"`
	Profile       string        `json:"profile,omitempty"`
	StateBefore   string        `json:"state_before,omitempty"`
	StateAfter    string        `json:"state_after,omitempty"`
	Outcome       Outcome       `json:"outcome"`
	OutputDigest  string        `json:"output_digest,omitempty"`
	Authorization Authorization `json:"authorization"`
	Match         Match         `json:"match"`
}

// SemanticFidelity says whether semantic judging was available.
type SemanticFidelity struct {
	Available bool   `json:"available"`
	Reason    string `json:"reason"`
}

// ReplayReport is the outcome of a replay (seed 004 ReplayReport). On the wire
// (MarshalJSON) status is the seed's literal — "success", "halted_at_edge_N" or
// "completed_with_surprises" — and fidelity the seed's score, edges committed over
// edges attempted; the level (§5.5) is fidelity_level.
type ReplayReport struct {
	ReplayID       string            `json:"replay_id"`
	SkillID        string            `json:"skill_id"`
	SkillVersion   int               `json:"skill_version"`
	Parameters     map[string]string `json:"input,omitempty"`
	Environment    string            `json:"environment"`
	Backend        string            `json:"backend"`
	Mode           ReplayMode        `json:"mode"`
	EdgesAttempted int               `json:"edges_attempted"`
	EdgesCommitted int               `json:"edges_committed"`
	Status         ReplayStatus      `json:"-"` // wire: StatusString()
	HaltedAtEdge   int               `json:"-"` // wire: in status
	Fidelity       Fidelity          `json:"fidelity_level"`
	Semantic       SemanticFidelity  `json:"semantic"`
	Edges          []ReplayEdge      `json:"edges"`
	Surprises      []SurpriseSignal  `json:"surprise_signals"`
	Denials        []Denial          `json:"denials,omitempty"`
}

// StatusString renders the seed's result: success, halted_at_edge_N or
// completed_with_surprises (running while a replay is in progress).
func (r *ReplayReport) StatusString() string {
	switch r.Status {
	case StatusHalted:
		return fmt.Sprintf("halted_at_edge_%d", r.HaltedAtEdge)
	case StatusCompletedWithSurprises:
		return "completed_with_surprises"
	default:
		return string(r.Status)
	}
}

// FidelityScore is the seed's fidelity: edges committed over edges attempted (0 when
// nothing was attempted).
func (r *ReplayReport) FidelityScore() float64 {
	if r.EdgesAttempted == 0 {
		return 0
	}
	return float64(r.EdgesCommitted) / float64(r.EdgesAttempted)
}

type replayReportFields ReplayReport

type replayReportWire struct {
	*replayReportFields
	Status   string  `json:"status"`
	Fidelity float64 `json:"fidelity"`
}

// MarshalJSON writes the seed's status literal and fidelity score.
func (r ReplayReport) MarshalJSON() ([]byte, error) {
	if r.Surprises == nil {
		r.Surprises = []SurpriseSignal{}
	}
	return json.Marshal(replayReportWire{replayReportFields: (*replayReportFields)(&r), Status: r.StatusString(), Fidelity: r.FidelityScore()})
}

var haltedRE = regexp.MustCompile(`^halted_at_edge_([1-9][0-9]{0,3})$`)

// UnmarshalJSON reads the seed's status literal back (strictly: unknown members refused)
// and checks the fidelity score against the edge counts.
func (r *ReplayReport) UnmarshalJSON(raw []byte) error {
	var out ReplayReport
	w := replayReportWire{replayReportFields: (*replayReportFields)(&out)}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	switch m := haltedRE.FindStringSubmatch(w.Status); {
	case m != nil:
		out.Status = StatusHalted
		out.HaltedAtEdge, _ = strconv.Atoi(m[1])
	case w.Status == string(StatusSuccess), w.Status == string(StatusCompletedWithSurprises), w.Status == string(StatusRunning):
		out.Status = ReplayStatus(w.Status)
	default:
		return fmt.Errorf("replay status %q is not success, halted_at_edge_N or completed_with_surprises", w.Status)
	}
	if w.Fidelity != out.FidelityScore() {
		return fmt.Errorf("replay fidelity %v is not edges_committed/edges_attempted (%d/%d)", w.Fidelity, out.EdgesCommitted, out.EdgesAttempted)
	}
	*r = out
	return nil
}

// PlannedStep is a step with parameters substituted.
type PlannedStep struct {
	Step
	// Comparable is false once a parameter with a non-default value has
	// entered the workspace: recorded digests then no longer predict it, and
	// only the structure of each edge is compared.
	Comparable bool
}

// Plan is a replay plan for one target.
type Plan struct {
	Manifest   *Manifest
	Parameters map[string]string
	Backend    string
	Mode       ReplayMode
	Steps      []PlannedStep
}

// NewPlan substitutes parameters (every declared one must have a value, or
// take its default when defaults is true; undeclared names are refused) and
// prepares the steps.
func NewPlan(m *Manifest, params map[string]string, backend string, mode ReplayMode) (*Plan, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if mode != ModeExact && mode != ModeStructural {
		return nil, refuse(actuation.CodeSkillInvalid, "mode", "must be %q or %q", ModeExact, ModeStructural)
	}
	declared := map[string]Parameter{}
	for _, p := range m.Parameters {
		declared[p.Name] = p
	}
	for k, v := range params {
		if _, ok := declared[k]; !ok {
			return nil, refuse(actuation.CodeSkillParameterUnknown, "parameters."+k, "must be declared by the skill")
		}
		if len(v) > MaxParameterValue || strings.ContainsAny(v, "\x00") {
			return nil, refuse(actuation.CodeSkillParameterInvalid, "parameters."+k, "must be at most %d bytes without NUL", MaxParameterValue)
		}
	}
	values := map[string]string{}
	changed := map[string]bool{}
	for _, p := range m.Parameters {
		v, ok := params[p.Name]
		if !ok {
			v = p.Default
		}
		values[p.Name] = v
		changed[p.Name] = v != p.Default
	}
	pl := &Plan{Manifest: m, Parameters: values, Backend: backend, Mode: mode}
	comparable := true
	for _, s := range m.Steps {
		st := PlannedStep{Step: deepCopyStep(s)}
		for _, n := range s.Parameters {
			if changed[n] {
				comparable = false
			}
		}
		st.Comparable = comparable
		subst := func(x string) string {
			for n, v := range values {
				x = strings.ReplaceAll(x, Ref(n), v)
			}
			return x
		}
		if c := st.Command; c != nil {
			for i := range c.Argv {
				c.Argv[i] = subst(c.Argv[i])
			}
			c.Cwd.Path = subst(c.Cwd.Path)
		}
		if p := st.Patch; p != nil {
			if p.Patch != nil {
				t := subst(*p.Patch)
				p.Patch = &t
			}
			for i := range p.Operations {
				p.Operations[i].Path = subst(p.Operations[i].Path)
				if p.Operations[i].Content != nil {
					t := subst(*p.Operations[i].Content)
					p.Operations[i].Content = &t
				}
			}
		}
		pl.Steps = append(pl.Steps, st)
	}
	return pl, nil
}

func deepCopyStep(s Step) Step {
	out := s
	if s.Command != nil {
		c := *s.Command
		c.Argv = slices.Clone(s.Command.Argv)
		out.Command = &c
	}
	if s.Patch != nil {
		p := *s.Patch
		if s.Patch.Patch != nil {
			t := *s.Patch.Patch
			p.Patch = &t
		}
		p.Operations = slices.Clone(s.Patch.Operations)
		out.Patch = &p
	}
	out.ExpectedChanges = slices.Clone(s.ExpectedChanges)
	return out
}

// CheckCapabilities refuses a step that needs a profile or backend the
// manifest does not declare (seed 004 §7.6): the step is never created.
func (p *Plan) CheckCapabilities(i int) *Denial {
	st := p.Steps[i]
	caps := p.Manifest.Capabilities
	if !slices.Contains(caps.Backends, p.Backend) {
		return &Denial{Edge: st.Index, Code: string(actuation.CodeCapabilityUndeclared),
			Message: fmt.Sprintf("backend %q is not declared by the skill (declared: %s)", p.Backend, strings.Join(caps.Backends, ", "))}
	}
	if st.Command != nil && !slices.Contains(caps.Profiles, st.Command.Profile) {
		return &Denial{Edge: st.Index, Code: string(actuation.CodeCapabilityUndeclared),
			Message: fmt.Sprintf("profile %q is not declared by the skill (declared: %s)", st.Command.Profile, strings.Join(caps.Profiles, ", "))}
	}
	return nil
}

// Observation is what the replayer saw around one step.
type Observation struct {
	Object        string
	Before        StateRef // state before the step (digest; entries when known)
	After         StateRef // state after the step
	Outcome       Outcome
	OutputDigest  string
	Authorization Authorization
	Profile       string
	// Changes are the edge's path changes as the node computed them; used instead of
	// diffing Before and After entries when ChangesKnown.
	Changes      []PathChange
	ChangesKnown bool
	// Gap are paths changed out of band between the previous edge and this one, as the
	// node saw them (the per-path difference of a state-before mismatch).
	Gap []PathChange
}

// Evaluate compares one observed edge with its step and returns the edge
// record and, when something differs, a surprise (Halted says whether replay
// must stop here).
func (p *Plan) Evaluate(i int, obs Observation) (ReplayEdge, *SurpriseSignal) {
	st := p.Steps[i]
	e := ReplayEdge{Seq: st.Index, Object: obs.Object, Backend: p.Backend, Profile: obs.Profile,
		StateBefore: obs.Before.Digest, StateAfter: obs.After.Digest, Outcome: obs.Outcome,
		OutputDigest: obs.OutputDigest, Authorization: obs.Authorization}
	if obs.Outcome.Phase == "Refused" || (obs.Outcome.Code != "" && obs.Authorization.Kind == "") {
		e.Match = MatchRefused
		return e, &SurpriseSignal{Edge: st.Index, Kind: SurpriseRefused, Halted: true,
			Message: fmt.Sprintf("step refused: %s", obs.Outcome.Code)}
	}
	if !sameOutcome(st.ExpectedOutcome, obs.Outcome) {
		e.Match = MatchDiverged
		return e, &SurpriseSignal{Edge: st.Index, Kind: SurpriseOutcome, Halted: true,
			ExpectedHash: st.ExpectedAfter, ObservedHash: obs.After.Digest,
			Message: fmt.Sprintf("outcome %s differs from the recorded %s", describeOutcome(obs.Outcome), describeOutcome(st.ExpectedOutcome))}
	}
	observedChanges, err := Changes(obs.Before.Entries, obs.After.Entries)
	haveEntries := obs.Before.Entries != nil && obs.After.Entries != nil && err == nil
	if obs.ChangesKnown {
		observedChanges, haveEntries = obs.Changes, true
	}
	if haveEntries {
		if diffs := p.effectDiffs(st, observedChanges); len(diffs) > 0 {
			e.Match = MatchDiverged
			s := &SurpriseSignal{Edge: st.Index, Kind: SurpriseEffect, Halted: true,
				ExpectedHash: st.ExpectedAfter, ObservedHash: obs.After.Digest,
				Message: "the edge changed the workspace differently than recorded"}
			s.Differences, s.DifferencesTruncated = capDiffs(diffs)
			return e, s
		}
	}
	if st.Comparable {
		if obs.After.Digest == st.ExpectedAfter && obs.Before.Digest == st.ExpectedBefore {
			e.Match = MatchExact
			return e, nil
		}
		kind, want, got := SurpriseStateAfter, st.ExpectedAfter, obs.After.Digest
		if obs.Before.Digest != st.ExpectedBefore {
			kind, want, got = SurpriseStateBefore, st.ExpectedBefore, obs.Before.Digest
		}
		s := &SurpriseSignal{Edge: st.Index, Kind: kind, ExpectedHash: want, ObservedHash: got,
			Halted:  p.Mode == ModeExact || !haveEntries,
			Message: "the workspace state hash differs from the recorded one"}
		s.Differences, s.DifferencesTruncated = capDiffs(p.stateDiffs(i, kind == SurpriseStateBefore, obs))
		if s.Halted {
			e.Match = MatchDiverged
		} else {
			e.Match = MatchStructural
		}
		return e, s
	}
	if !haveEntries {
		// Nothing comparable was observed: the edge cannot be judged.
		e.Match = MatchDiverged
		return e, &SurpriseSignal{Edge: st.Index, Kind: SurpriseEffect, Halted: true, ObservedHash: obs.After.Digest,
			Message: "no state listing was observed for a parameterized step"}
	}
	e.Match = MatchStructural
	return e, nil
}

// effectDiffs compares the observed change set with the recorded one: the
// same paths must change the same way (added, removed, changed; type and
// mode), and where the step is comparable, to the same content digest.
func (p *Plan) effectDiffs(st PlannedStep, observed []PathChange) []PathDifference {
	want := map[string]PathChange{}
	for _, c := range st.ExpectedChanges {
		want[c.Path] = c
	}
	got := map[string]PathChange{}
	for _, c := range observed {
		got[c.Path] = c
	}
	var out []PathDifference
	for _, path := range slices.Sorted(maps.Keys(mergeKeys(want, got))) {
		w, wok := want[path]
		g, gok := got[path]
		switch {
		case wok && !gok:
			out = append(out, PathDifference{Path: path, Expected: w.After})
		case !wok && gok:
			out = append(out, PathDifference{Path: path, Observed: g.After})
		case !sameSide(w.After, g.After, st.Comparable) || (w.Before == nil) != (g.Before == nil):
			out = append(out, PathDifference{Path: path, Expected: w.After, Observed: g.After})
		}
	}
	return out
}

func mergeKeys(a, b map[string]PathChange) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

func sameSide(a, b *PathState, compareDigest bool) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if a.Type != b.Type || a.Mode != b.Mode {
		return false
	}
	return !compareDigest || a.Type == "dir" || a.Digest == b.Digest
}

// stateDiffs lists the paths where the observed state differs from the
// expected one, reconstructed from the skill's initial listing and the
// recorded changes up to step i (before it or after it).
func (p *Plan) stateDiffs(i int, before bool, obs Observation) []PathDifference {
	if before && len(obs.Gap) > 0 {
		out := make([]PathDifference, 0, len(obs.Gap))
		for _, c := range obs.Gap {
			out = append(out, PathDifference{Path: c.Path, Expected: c.Before, Observed: c.After})
		}
		return out
	}
	if p.Manifest.InitialState.Entries == nil {
		return nil
	}
	expected := p.Manifest.InitialState.Entries
	upto := i + 1
	if before {
		upto = i
	}
	for _, s := range p.Steps[:upto] {
		expected = ApplyChanges(expected, s.ExpectedChanges)
	}
	observed := obs.After.Entries
	if before {
		observed = obs.Before.Entries
	}
	if observed == nil {
		return nil
	}
	ch, _ := changesUnbounded(expected, observed)
	out := make([]PathDifference, 0, len(ch))
	for _, c := range ch {
		if (c.Before != nil && c.Before.Type == "dir") && (c.After != nil && c.After.Type == "dir") {
			continue
		}
		out = append(out, PathDifference{Path: c.Path, Expected: c.Before, Observed: c.After})
	}
	return out
}

func changesUnbounded(a, b []StateEntry) ([]PathChange, error) {
	return convertChanges(treehash.Diff(toTree(a), toTree(b))), nil
}

func capDiffs(d []PathDifference) ([]PathDifference, bool) {
	if len(d) > MaxDifferences {
		return d[:MaxDifferences], true
	}
	return d, false
}

func sameOutcome(want, got Outcome) bool {
	if want.Phase != got.Phase {
		return false
	}
	if (want.ExitCode == nil) != (got.ExitCode == nil) {
		return false
	}
	return want.ExitCode == nil || *want.ExitCode == *got.ExitCode
}

func describeOutcome(o Outcome) string {
	s := o.Phase
	if o.ExitCode != nil {
		s += fmt.Sprintf(" (exit %d)", *o.ExitCode)
	}
	if o.Code != "" {
		s += " " + o.Code
	}
	return s
}

// Summarize computes counts, status and fidelity from the edges so far.
// complete says the replayer has nothing more to attempt.
func Summarize(r *ReplayReport, steps int, complete bool) {
	r.Semantic = SemanticFidelity{Available: false, Reason: "semantic fidelity needs a judge; none is configured"}
	r.EdgesAttempted = len(r.Edges)
	r.EdgesCommitted = 0
	exact := true
	halted := 0
	for _, e := range r.Edges {
		switch e.Match {
		case MatchExact:
			r.EdgesCommitted++
		case MatchStructural:
			r.EdgesCommitted++
			exact = false
		default:
			exact = false
		}
	}
	for _, s := range r.Surprises {
		if s.Halted && halted == 0 {
			halted = s.Edge
		}
	}
	for _, d := range r.Denials {
		if halted == 0 || d.Edge < halted {
			halted = d.Edge
		}
	}
	switch {
	case halted > 0:
		r.Status, r.HaltedAtEdge, r.Fidelity = StatusHalted, halted, FidelityFailed
	case !complete:
		r.Status, r.Fidelity = StatusRunning, FidelityInconclusive
	case r.EdgesAttempted == 0 || r.EdgesCommitted != steps:
		r.Status, r.Fidelity = StatusHalted, FidelityInconclusive
	case len(r.Surprises) > 0:
		r.Status, r.Fidelity = StatusCompletedWithSurprises, FidelityStructural
	case exact:
		r.Status, r.Fidelity = StatusSuccess, FidelityExact
	default:
		r.Status, r.Fidelity = StatusSuccess, FidelityStructural
	}
}

// Package skillsapi maps the Recording, Skill and SkillReplay API objects onto the skills
// core and back, in one place. The API types mirror the core's JSON field names, so the
// manifest maps through JSON and cannot drift field by field.
package skillsapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/skills"
)

// viaJSON copies in to out through JSON, renaming object keys with rename: the core's
// wire format is the seed's snake_case, the API's is Kubernetes camelCase, and both spell
// the same fields (a manifest holds no map whose keys are data).
func viaJSON(in, out any, rename func(string) string) error {
	raw, err := json.Marshal(in)
	if err != nil {
		return err
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return err
	}
	raw, err = json.Marshal(renameKeys(doc, rename))
	if err != nil {
		return err
	}
	// A Skill spec holds more than the manifest (recordingRef, traceArtifactRef,
	// traceDigest): those stay behind on the way to the core.
	return json.Unmarshal(raw, out)
}

func renameKeys(v any, rename func(string) string) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[rename(k)] = renameKeys(e, rename)
		}
		return m
	case []any:
		for i := range x {
			x[i] = renameKeys(x[i], rename)
		}
		return x
	default:
		return v
	}
}

// SnakeToCamel renames a snake_case key to camelCase ("derived_from_trace_id" → "derivedFromTraceId").
func SnakeToCamel(k string) string {
	var b strings.Builder
	up := false
	for _, r := range k {
		switch {
		case r == '_':
			up = true
		case up:
			b.WriteRune(unicode.ToUpper(r))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// CamelToSnake renames a camelCase key to snake_case ("derivedFromTraceId" → "derived_from_trace_id").
func CamelToSnake(k string) string {
	var b strings.Builder
	for _, r := range k {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// SkillSpec returns the Skill spec of a manifest.
func SkillSpec(m *skills.Manifest) (wbv1.SkillSpec, error) {
	var s wbv1.SkillSpec
	if err := viaJSON(m, &s, SnakeToCamel); err != nil {
		return s, fmt.Errorf("converting manifest %s to a Skill spec: %w", m.SkillID, err)
	}
	return s, nil
}

// Manifest returns the manifest of a Skill spec.
func Manifest(s *wbv1.SkillSpec) (*skills.Manifest, error) {
	var m skills.Manifest
	if err := viaJSON(s, &m, CamelToSnake); err != nil {
		return nil, fmt.Errorf("converting Skill spec %s to a manifest: %w", s.SkillID, err)
	}
	return &m, nil
}

// RecordedChanges converts path changes for a Recording status (at most max; truncated says
// whether more existed).
func RecordedChanges(ch []skills.PathChange, max int) ([]wbv1.RecordedPathChange, bool) {
	out := []wbv1.RecordedPathChange{}
	for i, c := range ch {
		if i == max {
			return out, true
		}
		out = append(out, wbv1.RecordedPathChange{Path: c.Path, Before: recordedState(c.Before), After: recordedState(c.After)})
	}
	return out, false
}

func recordedState(s *skills.PathState) *wbv1.RecordedPathState {
	if s == nil {
		return nil
	}
	return &wbv1.RecordedPathState{Type: wbv1.PathEntryType(s.Type), Mode: int64(s.Mode), Digest: s.Digest}
}

func coreState(s *wbv1.RecordedPathState) *skills.PathState {
	if s == nil {
		return nil
	}
	return &skills.PathState{Type: string(s.Type), Mode: uint32(s.Mode), Digest: s.Digest}
}

// CoreChanges converts recorded path changes back.
func CoreChanges(ch []wbv1.RecordedPathChange) []skills.PathChange {
	out := make([]skills.PathChange, 0, len(ch))
	for _, c := range ch {
		out = append(out, skills.PathChange{Path: c.Path, Before: coreState(c.Before), After: coreState(c.After)})
	}
	return out
}

// ReplayStatus writes a replay report into a SkillReplay status (counts, result, fidelity,
// edges, surprises, denials) and the proof summary when given.
func ReplayStatus(st *wbv1.SkillReplayStatus, r *skills.ReplayReport, p *skills.ProofResult) {
	st.ReplayID = r.ReplayID
	st.Backend = r.Backend
	st.EdgesAttempted, st.EdgesCommitted = int32(r.EdgesAttempted), int32(r.EdgesCommitted)
	st.Fidelity = wbv1.ReplayFidelity(r.Fidelity)
	st.Semantic = &wbv1.SemanticFidelity{Available: r.Semantic.Available, Reason: r.Semantic.Reason}
	switch r.Status {
	case skills.StatusSuccess:
		st.Result = wbv1.SkillReplaySuccess
	case skills.StatusHalted:
		st.Result = wbv1.SkillReplayHaltedAtEdge
	case skills.StatusCompletedWithSurprises:
		st.Result = wbv1.SkillReplayCompletedWithSurprises
	default:
		st.Result = wbv1.SkillReplayRunning
	}
	st.HaltedAtEdge = int32(r.HaltedAtEdge)
	st.ResultText = r.StatusString()
	if r.Status == skills.StatusRunning {
		st.ResultText = "running"
	}
	st.Edges = nil
	for _, e := range r.Edges {
		st.Edges = append(st.Edges, wbv1.SkillReplayEdge{Seq: int32(e.Seq), Object: e.Object, Backend: e.Backend, Profile: e.Profile,
			StateBefore: e.StateBefore, StateAfter: e.StateAfter,
			Outcome:      wbv1.SkillOutcome{Phase: e.Outcome.Phase, ExitCode: e.Outcome.ExitCode, Code: e.Outcome.Code},
			OutputDigest: e.OutputDigest, Authorization: wbv1.SkillAuthorization{Kind: string(e.Authorization.Kind), Ref: e.Authorization.Ref},
			Match: wbv1.StepMatch(e.Match)})
	}
	st.Surprises = nil
	for _, s := range r.Surprises {
		ws := wbv1.SurpriseSignal{Edge: int32(s.Edge), Kind: wbv1.SurpriseKind(s.Kind), ExpectedHash: wbv1.Digest(s.ExpectedHash), ObservedHash: wbv1.Digest(s.ObservedHash),
			DifferencesTruncated: s.DifferencesTruncated, Message: truncate(s.Message, 1024), Halted: s.Halted}
		for _, d := range s.Differences {
			ws.Differences = append(ws.Differences, wbv1.PathDifference{Path: d.Path, Expected: recordedState(d.Expected), Observed: recordedState(d.Observed)})
		}
		st.Surprises = append(st.Surprises, ws)
	}
	st.Denials = nil
	for _, d := range r.Denials {
		st.Denials = append(st.Denials, wbv1.SkillDenial{Edge: int32(d.Edge), Code: d.Code, Message: truncate(d.Message, 1024)})
	}
	if p != nil {
		ps := &wbv1.ProofSummary{OverallVerdict: wbv1.ProofVerdict(p.OverallVerdict)}
		for _, g := range p.Gates {
			ps.Gates = append(ps.Gates, wbv1.ProofGate{ID: g.ID, Verdict: wbv1.GateVerdict(g.Verdict), Level: g.Level, Reason: truncate(g.Reason, 1024)})
		}
		st.Proof = ps
	}
}

// Report reads a replay report back from a SkillReplay (for export and for the proof).
func Report(sr *wbv1.SkillReplay, m *skills.Manifest) *skills.ReplayReport {
	st := &sr.Status
	r := &skills.ReplayReport{ReplayID: st.ReplayID, SkillID: m.SkillID, SkillVersion: m.Version,
		Environment: string(sr.Spec.EnvironmentRef), Backend: st.Backend, Mode: skills.ReplayMode(sr.Spec.Mode),
		Parameters: map[string]string{}, Edges: []skills.ReplayEdge{}}
	for _, p := range sr.Spec.Parameters {
		r.Parameters[p.Name] = p.Value
	}
	if len(r.Parameters) == 0 {
		r.Parameters = nil
	}
	for _, e := range st.Edges {
		r.Edges = append(r.Edges, skills.ReplayEdge{Seq: int(e.Seq), Object: e.Object, Backend: e.Backend, Profile: e.Profile,
			StateBefore: e.StateBefore, StateAfter: e.StateAfter,
			Outcome:      skills.Outcome{Phase: e.Outcome.Phase, ExitCode: e.Outcome.ExitCode, Code: e.Outcome.Code},
			OutputDigest: e.OutputDigest, Authorization: skills.Authorization{Kind: skills.AuthorizationKind(e.Authorization.Kind), Ref: e.Authorization.Ref},
			Match: skills.Match(e.Match)})
	}
	for _, s := range st.Surprises {
		cs := skills.SurpriseSignal{Edge: int(s.Edge), Kind: string(s.Kind), ExpectedHash: string(s.ExpectedHash), ObservedHash: string(s.ObservedHash),
			DifferencesTruncated: s.DifferencesTruncated, Message: s.Message, Halted: s.Halted}
		for _, d := range s.Differences {
			cs.Differences = append(cs.Differences, skills.PathDifference{Path: d.Path, Expected: coreState(d.Expected), Observed: coreState(d.Observed)})
		}
		r.Surprises = append(r.Surprises, cs)
	}
	for _, d := range st.Denials {
		r.Denials = append(r.Denials, skills.Denial{Edge: int(d.Edge), Code: d.Code, Message: d.Message})
	}
	complete := st.Result != "" && st.Result != wbv1.SkillReplayRunning
	skills.Summarize(r, len(m.Steps), complete)
	return r
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// Now is a metav1 time helper.
func Now() *metav1.Time { t := metav1.Now(); return &t }

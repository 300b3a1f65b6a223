package skills

import (
	"bytes"
	"encoding/json"
	"time"

	"sensorium.dev/workbench/internal/actuation"
)

// Reproducible reports whether v's RFC 8785 canonical form is the same by way of its
// typed encoding and by way of a generic re-decoding of that encoding (two independent
// serializations).
func Reproducible(v any) bool {
	a, err := actuation.CanonicalJSON(v)
	if err != nil {
		return false
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return false
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		return false
	}
	b, err := actuation.CanonicalJSON(generic)
	return err == nil && bytes.Equal(a, b)
}

// ReplayTrace is the trace a replay itself produced: one edge per executed step, with the
// state hashes, outcome and authorization the replayer observed. It is the evidence a
// SkillReplay's own proof rests on.
func ReplayTrace(pl *Plan, r *ReplayReport, initialState string, started time.Time) *Trace {
	t := &Trace{Schema: TraceSchema, TraceID: r.ReplayID, Environment: r.Environment, Backend: r.Backend, StartedAt: started,
		InitialState: StateRef{Digest: initialState}, Edges: []Edge{}}
	for _, e := range r.Edges {
		if e.Match == MatchRefused || e.Seq < 1 || e.Seq > len(pl.Steps) {
			continue
		}
		st := pl.Steps[e.Seq-1]
		edge := Edge{Seq: len(t.Edges) + 1, Kind: st.Kind, Object: e.Object, Backend: e.Backend, StateBefore: e.StateBefore, StateAfter: e.StateAfter,
			Outcome: e.Outcome, Authorization: e.Authorization}
		switch {
		case st.Command != nil:
			d, _ := actuation.Digest(st.Command.Argv)
			edge.Command = &CommandEdge{Profile: st.Command.Profile, ArgvDigest: d, Cwd: st.Command.Cwd, OutputDigest: e.OutputDigest}
		case st.Patch != nil:
			edge.Patch = &PatchEdge{Root: st.Patch.Root, Format: st.Patch.Format}
		case st.Condition != nil:
			c := *st.Condition
			edge.Condition = &c
		}
		t.Edges = append(t.Edges, edge)
	}
	return t
}

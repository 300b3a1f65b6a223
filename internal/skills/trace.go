package skills

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/treehash"
)

func refuse(code actuation.Code, field, format string, args ...any) error {
	return actuation.Refuse(code, field, format, args...).Err()
}

// StateEntries converts a treehash state into the trace's entry listing.
func StateEntries(s *treehash.State) []StateEntry {
	out := make([]StateEntry, 0, len(s.Entries))
	for _, e := range s.Entries {
		out = append(out, StateEntry{Path: e.Path, PathState: PathState{Type: e.Type, Mode: e.Mode, Digest: e.Digest}})
	}
	return out
}

// InitialStateRef is a trace's initial state: the digest always, the entry listing only
// up to MaxInitialEntries (a larger tree — a real repository — keeps its digest, and a
// state-before surprise then lists the out-of-band changes the node saw instead of a
// reconstruction from the listing).
func InitialStateRef(s *treehash.State) StateRef {
	if len(s.Entries) > MaxInitialEntries {
		return StateRef{Digest: s.Digest}
	}
	return StateRef{Digest: s.Digest, Entries: StateEntries(s)}
}

// Changes lists the per-path differences between two entry listings (see
// treehash.Diff), refusing more than MaxChangesPerEdge.
func Changes(before, after []StateEntry) ([]PathChange, error) {
	ch := treehash.Diff(toTree(before), toTree(after))
	if len(ch) > MaxChangesPerEdge {
		return nil, refuse(actuation.CodeTraceTooLarge, "changes", "an edge must not change more than %d paths (%d changed)", MaxChangesPerEdge, len(ch))
	}
	return convertChanges(ch), nil
}

func convertChanges(ch []treehash.Change) []PathChange {
	out := make([]PathChange, 0, len(ch))
	for _, c := range ch {
		pc := PathChange{Path: c.Path}
		if c.Before != nil {
			pc.Before = &PathState{Type: c.Before.Type, Mode: c.Before.Mode, Digest: c.Before.Digest}
		}
		if c.After != nil {
			pc.After = &PathState{Type: c.After.Type, Mode: c.After.Mode, Digest: c.After.Digest}
		}
		out = append(out, pc)
	}
	return out
}

func toTree(es []StateEntry) []treehash.Entry {
	out := make([]treehash.Entry, 0, len(es))
	for _, e := range es {
		out = append(out, treehash.Entry{Path: e.Path, Type: e.Type, Mode: e.Mode, Digest: e.Digest})
	}
	return out
}

// ApplyChanges returns entries with changes applied (the expected state after
// an edge), sorted by path.
func ApplyChanges(entries []StateEntry, changes []PathChange) []StateEntry {
	m := make(map[string]PathState, len(entries))
	for _, e := range entries {
		m[e.Path] = e.PathState
	}
	for _, c := range changes {
		if c.After == nil {
			delete(m, c.Path)
		} else {
			m[c.Path] = *c.After
		}
	}
	out := make([]StateEntry, 0, len(m))
	for p, s := range m {
		out = append(out, StateEntry{Path: p, PathState: s})
	}
	slices.SortFunc(out, func(a, b StateEntry) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Bounded copies at most max bytes of s for a trace and reports truncation.
func Bounded(s string, max int) (*string, bool) {
	if len(s) <= max {
		return &s, false
	}
	cut := s[:max]
	for len(cut) > 0 && !utf8.FullRuneInString(cut[lastRuneStart(cut):]) {
		cut = cut[:lastRuneStart(cut)]
	}
	return &cut, true
}

func lastRuneStart(s string) int {
	i := len(s) - 1
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

var edgeKinds = []EdgeKind{EdgeCommand, EdgePatch, EdgeWait, EdgeProbe}

// AppendEdge adds e to t as the next edge (setting Seq), refusing at the cap.
func (t *Trace) AppendEdge(e Edge) error {
	if len(t.Edges) >= MaxEdges {
		return refuse(actuation.CodeTraceTooLarge, "edges", "a trace must not hold more than %d edges", MaxEdges)
	}
	if len(e.Changes) > MaxChangesPerEdge {
		return refuse(actuation.CodeTraceTooLarge, "changes", "an edge must not change more than %d paths", MaxChangesPerEdge)
	}
	e.Seq = len(t.Edges) + 1
	t.Edges = append(t.Edges, e)
	return nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// IsUUIDv7 reports whether s is a lowercase UUIDv7.
func IsUUIDv7(s string) bool { return uuidRE.MatchString(s) }

// Problems lists what makes the trace incomplete (empty when complete):
// every edge needs a known kind, contiguous seq, state hashes before and
// after, an authorization, and its kind's detail (argv digest for commands).
// Hashes may be redacted away from nothing: a trace keeps them under every
// redaction profile.
func (t *Trace) Problems() []string {
	var p []string
	if t.Schema != TraceSchema {
		p = append(p, fmt.Sprintf("schema %q is not %q", t.Schema, TraceSchema))
	}
	if !IsUUIDv7(t.TraceID) {
		p = append(p, "traceId is not a UUIDv7")
	}
	if len(t.Edges) > MaxEdges {
		p = append(p, fmt.Sprintf("more than %d edges", MaxEdges))
	}
	if !actuation.IsDigest(t.InitialState.Digest) {
		p = append(p, "initialState.digest is missing")
	}
	for i, e := range t.Edges {
		f := fmt.Sprintf("edges[%d]", i)
		if e.Seq != i+1 {
			p = append(p, fmt.Sprintf("%s.seq is %d, want %d", f, e.Seq, i+1))
		}
		if !slices.Contains(edgeKinds, e.Kind) {
			p = append(p, fmt.Sprintf("%s.kind %q is unknown", f, e.Kind))
		}
		if !actuation.IsDigest(e.StateBefore) || !actuation.IsDigest(e.StateAfter) {
			p = append(p, f+" lacks stateBefore or stateAfter")
		}
		if e.Authorization.Kind == "" || e.Authorization.Ref == "" {
			p = append(p, f+" lacks its authorization")
		}
		if len(e.OutOfBand) > 0 {
			p = append(p, fmt.Sprintf("%s: the workspace changed out of band before it (%d paths, first %s)", f, len(e.OutOfBand), e.OutOfBand[0].Path))
		}
		if len(e.Changes) > MaxChangesPerEdge {
			p = append(p, fmt.Sprintf("%s has more than %d changes", f, MaxChangesPerEdge))
		}
		switch e.Kind {
		case EdgeCommand:
			if e.Command == nil || !actuation.IsDigest(e.Command.ArgvDigest) || e.Command.Profile == "" {
				p = append(p, f+" lacks its command, argvDigest or profile")
			}
		case EdgePatch:
			if e.Patch == nil || e.Patch.Root == "" {
				p = append(p, f+" lacks its patch")
			}
		case EdgeWait, EdgeProbe:
			if e.Condition == nil {
				p = append(p, f+" lacks its condition")
			}
		}
	}
	return p
}

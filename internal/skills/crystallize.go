package skills

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"sensorium.dev/workbench/internal/actuation"
)

// ParamSpec names a demonstrated literal as a parameter: every occurrence of
// Value in argv atoms, cwd paths, patch text, operation paths and contents
// becomes "{{Name}}".
type ParamSpec struct {
	Name  string
	Value string
}

// CrystallizeOptions shape the manifest.
type CrystallizeOptions struct {
	SkillID     string // empty: a new UUIDv7
	Name        string
	Description string
	Version     int // 0: 1
	Parameters  []ParamSpec
	// ExtraBackends are further backends the skill declares it may replay on.
	ExtraBackends []string
	Now           time.Time
}

var (
	paramNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	slugDropRE  = regexp.MustCompile(`[^a-z0-9]+`)
)

// Ref returns the template reference of a parameter.
func Ref(name string) string { return "{{" + name + "}}" }

// Slug makes a kebab-case slug of a name.
func Slug(name string) string {
	s := strings.Trim(slugDropRE.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(s) > 63 {
		s = strings.TrimRight(s[:63], "-")
	}
	if s == "" {
		s = "skill"
	}
	return s
}

// Crystallize turns a complete trace into a skill manifest: the executed
// command and patch edges (and the satisfied waits and probes, replayed as
// state checks) become ordered steps with the recorded state hashes as
// expectations; named parameters replace their demonstrated literals; the
// profiles and backends used become the declared capabilities. Edges refused
// during the demonstration do not become steps.
func Crystallize(t *Trace, opts CrystallizeOptions) (*Manifest, error) {
	if probs := t.Problems(); len(probs) > 0 {
		return nil, refuse(actuation.CodeTraceInvalid, "trace", "must be complete: %s", strings.Join(probs, "; "))
	}
	if len(t.Edges) == 0 {
		return nil, refuse(actuation.CodeTraceInvalid, "trace.edges", "must hold at least one edge")
	}
	if strings.TrimSpace(opts.Name) == "" || len(opts.Name) > MaxNameLength {
		return nil, refuse(actuation.CodeSkillInvalid, "name", "must be 1..%d characters", MaxNameLength)
	}
	if len(opts.Description) > MaxDescriptionSize {
		return nil, refuse(actuation.CodeSkillInvalid, "description", "must not exceed %d bytes", MaxDescriptionSize)
	}
	if err := checkParamSpecs(opts.Parameters); err != nil {
		return nil, err
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now().UTC()
	}
	if opts.Version == 0 {
		opts.Version = 1
	}
	if opts.SkillID == "" {
		opts.SkillID = NewID()
	}
	m := &Manifest{
		Schema: ManifestSchema, SkillID: opts.SkillID, Name: opts.Name, Slug: Slug(opts.Name),
		Description: opts.Description, Version: opts.Version, DerivedFromTraceID: t.TraceID,
		Backend: t.Backend, InitialState: t.InitialState, FallbackBehavior: FallbackBehavior,
		CreatedAt: opts.Now.Truncate(time.Second),
	}
	counts := make(map[string]int)
	sub := func(s string, used map[string]bool) string {
		for _, p := range opts.Parameters {
			if n := strings.Count(s, p.Value); n > 0 {
				counts[p.Name] += n
				used[p.Name] = true
				s = strings.ReplaceAll(s, p.Value, Ref(p.Name))
			}
		}
		return s
	}
	profiles := map[string]bool{}
	for _, e := range t.Edges {
		if e.Outcome.Code != "" && e.Outcome.Phase == "Refused" {
			continue
		}
		used := map[string]bool{}
		st := Step{Index: len(m.Steps) + 1, Kind: e.Kind, ExpectedBefore: e.StateBefore, ExpectedAfter: e.StateAfter,
			ExpectedChanges: e.Changes, ExpectedOutcome: e.Outcome}
		switch e.Kind {
		case EdgeCommand:
			if e.Command.Argv == nil {
				return nil, refuse(actuation.CodeTraceInvalid, fmt.Sprintf("trace.edges[%d].command.argv", e.Seq-1), "must be present to crystallize (the trace was redacted)")
			}
			argv := make([]string, len(e.Command.Argv))
			for i, a := range e.Command.Argv {
				argv[i] = sub(a, used)
			}
			st.Command = &CommandStep{Profile: e.Command.Profile, Argv: argv, Cwd: Cwd{Root: e.Command.Cwd.Root, Path: sub(e.Command.Cwd.Path, used)}}
			profiles[e.Command.Profile] = true
		case EdgePatch:
			ps := &PatchStep{Root: e.Patch.Root, Format: e.Patch.Format}
			if e.Patch.Patch != nil {
				txt := sub(*e.Patch.Patch, used)
				ps.Patch = &txt
			}
			for _, op := range e.Patch.Operations {
				o := PatchOperation{Op: op.Op, Path: sub(op.Path, used)}
				if op.Content != nil {
					c := sub(*op.Content, used)
					o.Content = &c
				} else if op.ContentDigest != "" {
					return nil, refuse(actuation.CodeTraceInvalid, fmt.Sprintf("trace.edges[%d].patch", e.Seq-1), "must carry operation contents to crystallize (the trace was redacted)")
				}
				ps.Operations = append(ps.Operations, o)
			}
			if ps.Patch == nil && len(ps.Operations) == 0 {
				return nil, refuse(actuation.CodeTraceInvalid, fmt.Sprintf("trace.edges[%d].patch", e.Seq-1), "must carry its patch text or operations to crystallize")
			}
			st.Patch = ps
		case EdgeWait, EdgeProbe:
			c := *e.Condition
			st.Condition = &c
		}
		for n := range used {
			st.Parameters = append(st.Parameters, n)
		}
		slices.Sort(st.Parameters)
		m.Steps = append(m.Steps, st)
	}
	if len(m.Steps) == 0 {
		return nil, refuse(actuation.CodeTraceInvalid, "trace.edges", "must hold at least one executed edge")
	}
	for _, p := range opts.Parameters {
		if counts[p.Name] == 0 {
			return nil, refuse(actuation.CodeSkillParameterUnknown, "parameters."+p.Name, "must occur in the demonstration (value %q not found)", p.Value)
		}
		m.Parameters = append(m.Parameters, Parameter{Name: p.Name, Default: p.Value, Occurrences: counts[p.Name]})
	}
	m.Capabilities.Profiles = sortedKeys(profiles)
	backends := map[string]bool{t.Backend: true}
	for _, b := range opts.ExtraBackends {
		backends[b] = true
	}
	m.Capabilities.Backends = sortedKeys(backends)
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

func checkParamSpecs(ps []ParamSpec) error {
	if len(ps) > MaxParameters {
		return refuse(actuation.CodeSkillParameterInvalid, "parameters", "must not exceed %d parameters", MaxParameters)
	}
	seen := map[string]bool{}
	for _, p := range ps {
		if !paramNameRE.MatchString(p.Name) {
			return refuse(actuation.CodeSkillParameterInvalid, "parameters."+p.Name, "name must match %s", paramNameRE)
		}
		if seen[p.Name] {
			return refuse(actuation.CodeSkillParameterInvalid, "parameters."+p.Name, "must be named once")
		}
		seen[p.Name] = true
		if len(p.Value) < 2 || len(p.Value) > MaxParameterValue {
			return refuse(actuation.CodeSkillParameterInvalid, "parameters."+p.Name, "demonstrated value must be 2..%d bytes", MaxParameterValue)
		}
		if strings.Contains(p.Value, "{{") || strings.Contains(p.Value, "}}") {
			return refuse(actuation.CodeSkillParameterInvalid, "parameters."+p.Name, "value must not contain template braces")
		}
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		if k != "" {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Validate checks a manifest's shape: identifiers, bounds, step order,
// expected hashes, declared parameter references.
func (m *Manifest) Validate() error { return m.validate(false) }

// validate with redacted set accepts steps whose argv a full redaction removed.
func (m *Manifest) validate(redacted bool) error {
	bad := func(field, format string, args ...any) error {
		return refuse(actuation.CodeSkillInvalid, field, format, args...)
	}
	switch {
	case m.Schema != ManifestSchema:
		return bad("schema", "must be %q", ManifestSchema)
	case !IsUUIDv7(m.SkillID):
		return bad("skill_id", "must be a UUIDv7")
	case m.Name == "" || len(m.Name) > MaxNameLength:
		return bad("name", "must be 1..%d characters", MaxNameLength)
	case m.Slug != Slug(m.Slug):
		return bad("slug", "must be kebab-case [a-z0-9-]+")
	case m.Version < 1:
		return bad("version", "must be at least 1")
	case len(m.Steps) == 0 || len(m.Steps) > MaxEdges:
		return bad("steps", "must hold 1..%d steps", MaxEdges)
	case len(m.Parameters) > MaxParameters:
		return bad("parameters", "must not exceed %d", MaxParameters)
	case m.FallbackBehavior != FallbackBehavior:
		return bad("fallback_behavior", "must be %q", FallbackBehavior)
	case !actuation.IsDigest(m.InitialState.Digest):
		return bad("initial_state.digest", "must be a sha256 digest")
	}
	declared := map[string]bool{}
	for _, p := range m.Parameters {
		if !paramNameRE.MatchString(p.Name) || declared[p.Name] {
			return bad("parameters."+p.Name, "must be a unique name matching %s", paramNameRE)
		}
		declared[p.Name] = true
	}
	for i, s := range m.Steps {
		f := fmt.Sprintf("steps[%d]", i)
		if s.Index != i+1 {
			return bad(f+".index", "must be %d", i+1)
		}
		if !actuation.IsDigest(s.ExpectedBefore) || !actuation.IsDigest(s.ExpectedAfter) {
			return bad(f, "must carry expectedBefore and expectedAfter digests")
		}
		for _, p := range s.Parameters {
			if !declared[p] {
				return bad(f+".parameters", "references undeclared parameter %q", p)
			}
		}
		switch s.Kind {
		case EdgeCommand:
			if s.Command == nil || s.Command.Profile == "" || (len(s.Command.Argv) == 0 && !redacted) || len(s.Command.Argv) > MaxArgvAtoms {
				return bad(f+".command", "must name a profile and 1..%d argv atoms", MaxArgvAtoms)
			}
		case EdgePatch:
			if s.Patch == nil || s.Patch.Root == "" {
				return bad(f+".patch", "must name a root")
			}
		case EdgeWait, EdgeProbe:
			if s.Condition == nil {
				return bad(f+".condition", "must be set")
			}
		default:
			return bad(f+".kind", "kind %q is unknown", s.Kind)
		}
	}
	return nil
}

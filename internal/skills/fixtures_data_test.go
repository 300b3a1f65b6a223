package skills

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

var updateFixtures = flag.Bool("update-fixtures", false, "rewrite test/fixtures/skills/data from the fixtures' inputs")

type dataFixture struct {
	ID           string         `json:"id"`
	File         string         `json:"file"`
	Purpose      string         `json:"purpose"`
	Inputs       map[string]any `json:"inputs"`
	PassCriteria map[string]any `json:"pass_criteria"`
}

func dataDir() string { return filepath.Join("..", "..", "test", "fixtures", "skills", "data") }

func loadDataFixtures(t *testing.T) []dataFixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dataDir(), "fixtures.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		About    string        `json:"about"`
		Fixtures []dataFixture `json:"fixtures"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Fixtures) != 5 {
		t.Fatalf("the seed names five data fixtures, the index has %d", len(idx.Fixtures))
	}
	return idx.Fixtures
}

// generate builds a fixture's document from its inputs: the standard demonstration with
// the given output, a replay (none, faithful, or tampered out of band before an edge),
// the export with the given redaction ("" = the detector's pre-selection), and optionally
// a member dropped afterwards.
func generate(t *testing.T, in map[string]any) []byte {
	t.Helper()
	d := standard(t, in["demonstration_output"].(string))
	m := crystallize(t, d)
	var r *ReplayReport
	switch in["replay"] {
	case "faithful", "tamper":
		pl, err := NewPlan(m, nil, "host-local", ModeExact)
		if err != nil {
			t.Fatal(err)
		}
		var between func(i int, dir string)
		if in["replay"] == "tamper" {
			at := int(in["tamper_before_edge"].(float64))
			path := in["tamper_path"].(string)
			between = func(i int, dir string) {
				if i+1 == at {
					writeFile(t, dir, path, "changed out of band\n")
				}
			}
		}
		r = replayIntoBetween(t, pl, freshCopy(t), faithful(pl), nil, between)
	}
	b, err := Export(exportInput(d, m, r), ExportOptions{Profile: RedactionProfile(in["redaction"].(string))})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if drop, ok := in["drop_member"].(string); ok {
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		delete(doc, drop)
		if raw, err = json.MarshalIndent(doc, "", "  "); err != nil {
			t.Fatal(err)
		}
	}
	return append(raw, '\n')
}

// TestDataFixtures decodes each golden file, validates it against the published schema,
// imports it and asserts every pass_criteria entry of its index entry.
func TestDataFixtures(t *testing.T) {
	for _, fx := range loadDataFixtures(t) {
		t.Run(fx.ID, func(t *testing.T) {
			path := filepath.Join(dataDir(), fx.File)
			if *updateFixtures {
				if err := os.WriteFile(path, generate(t, fx.Inputs), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			checkCriteria(t, fx, raw)
		})
	}
}

func checkCriteria(t *testing.T, fx dataFixture, raw []byte) {
	t.Helper()
	schemaErr := ValidateSchema(raw)
	im, importErr := ImportWith(raw, ImportOptions{})
	var b *Bundle
	if im != nil {
		b = im.Bundle
	}
	need := func(key string) *Bundle {
		if b == nil {
			t.Fatalf("%s: criterion %s needs an imported bundle (import: %v)", fx.ID, key, importErr)
		}
		return b
	}
	needReplay := func(key string) *ReplayReport {
		if need(key).Replay == nil {
			t.Fatalf("%s: criterion %s needs a replay report", fx.ID, key)
		}
		return b.Replay
	}
	num := func(v any) int { return int(v.(float64)) }
	strs := func(v any) []string {
		out := []string{}
		for _, x := range v.([]any) {
			out = append(out, x.(string))
		}
		return out
	}
	halting := func(key string) SurpriseSignal {
		r := needReplay(key)
		for _, s := range r.Surprises {
			if s.Halted {
				return s
			}
		}
		t.Fatalf("%s: no halting SurpriseSignal in %+v", fx.ID, r.Surprises)
		return SurpriseSignal{}
	}
	for key, want := range fx.PassCriteria {
		var got any
		switch key {
		case "schema_valid":
			got = schemaErr == nil
			if got != want {
				t.Errorf("%s: schema_valid %v (%v), want %v", fx.ID, got, schemaErr, want)
			}
			continue
		case "import":
			got = "ok"
			if importErr != nil {
				got = actuation.CodeOf(importErr)
			}
		case "signed":
			got = need(key).Signed
			if b.Signed != (b.Signature != nil) {
				t.Errorf("%s: signed %v with signature %v", fx.ID, b.Signed, b.Signature)
			}
		case "trace_min_edges":
			if len(need(key).Trace.Edges) < num(want) {
				t.Errorf("%s: %d edges, want at least %v", fx.ID, len(b.Trace.Edges), want)
			}
			continue
		case "overall_verdict":
			got = string(need(key).Proof.OverallVerdict)
		case "replay_status":
			got = needReplay(key).StatusString()
			if b.Proof.Replay == nil || b.Proof.Replay.Status != got {
				t.Errorf("%s: proof.replay_result %+v disagrees with the report's %v", fx.ID, b.Proof.Replay, got)
			}
		case "fidelity":
			got = needReplay(key).FidelityScore()
			want = want.(float64)
		case "fidelity_level":
			got = string(needReplay(key).Fidelity)
		case "edges_committed_equals_attempted":
			r := needReplay(key)
			got = r.EdgesCommitted == r.EdgesAttempted && r.EdgesAttempted == len(b.Manifest.Steps)
		case "edges_committed":
			got, want = needReplay(key).EdgesCommitted, num(want)
		case "surprise_signals":
			got, want = len(needReplay(key).Surprises), num(want)
		case "halted_at_edge":
			got, want = needReplay(key).HaltedAtEdge, num(want)
		case "surprise_edge":
			got, want = halting(key).Edge, num(want)
		case "surprise_halted":
			got = halting(key).Halted
		case "surprise_kind":
			got = halting(key).Kind
		case "surprise_path":
			s := halting(key)
			paths := []string{}
			for _, d := range s.Differences {
				paths = append(paths, d.Path)
			}
			if !slices.Contains(paths, want.(string)) {
				t.Errorf("%s: the halting surprise names %v, want %v among them", fx.ID, paths, want)
			}
			continue
		case "redaction_profile":
			got = string(need(key).RedactionProfile)
			if b.Evidence.RedactionProfile != b.RedactionProfile || b.Proof.Redaction.Profile != b.RedactionProfile {
				t.Errorf("%s: redaction profile disagrees across bundle, evidence and proof", fx.ID)
			}
		case "redaction_selection":
			got = need(key).Proof.Redaction.Selection
		case "secrets_found_before":
			got, want = fmt.Sprint(need(key).Proof.Redaction.SecretsFoundBefore), fmt.Sprint(strs(want))
		case "secrets_remaining":
			got, want = fmt.Sprint(need(key).Proof.Redaction.SecretsRemaining), fmt.Sprint(strs(want))
			if len(Scan(&b.Manifest, &b.Trace, b.Replay)) != len(b.Proof.Redaction.SecretsRemaining) {
				t.Errorf("%s: a scan of the imported bundle disagrees with secrets_remaining", fx.ID)
			}
		case "transcript_stripped":
			stripped := true
			for _, e := range need(key).Trace.Edges {
				if e.Command != nil && e.Command.Output != nil {
					stripped = false
				}
				if e.Patch != nil {
					for _, op := range e.Patch.Operations {
						if op.Content != nil {
							stripped = false
						}
					}
				}
			}
			got = stripped
			if bytes.Contains(raw, []byte("AKIAIOSFODNN7EXAMPLE")) {
				t.Errorf("%s: the fake secret is still in the file", fx.ID)
			}
		case "post_redaction_hash_matches":
			got = need(key).Proof.Redaction.PostRedactionHashMatches
		case "conformance_passed":
			got, want = fmt.Sprint(need(key).Proof.Conformance.FixturesPassed), fmt.Sprint(strs(want))
		case "conformance_failed":
			got, want = fmt.Sprint(need(key).Proof.Conformance.FixturesFailed), fmt.Sprint(strs(want))
		default:
			t.Fatalf("%s: unknown pass criterion %q: every criterion must be asserted", fx.ID, key)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %s is %v, want %v", fx.ID, key, got, want)
		}
	}
}

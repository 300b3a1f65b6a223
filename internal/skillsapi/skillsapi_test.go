package skillsapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/skills"
)

// A manifest with every field set survives the trip to a Skill spec (camelCase) and back
// (the seed's snake_case), field for field.
func TestManifestRoundTripsThroughSkillSpec(t *testing.T) {
	text, content := "--- a\n+++ b\n", "x\n"
	code := int32(0)
	m := &skills.Manifest{Schema: skills.ManifestSchema, SkillID: skills.NewID(), Name: "n", Slug: "n", Description: "d", Version: 2,
		DerivedFromTraceID: skills.NewID(), Backend: "host-local",
		Parameters: []skills.Parameter{{Name: "who", Default: "world", Occurrences: 2}},
		Steps: []skills.Step{
			{Index: 1, Kind: skills.EdgeCommand, Command: &skills.CommandStep{Profile: "echo", Argv: []string{"echo", "{{who}}"}, Cwd: skills.Cwd{Root: "repo", Path: "sub"}},
				ExpectedBefore: "sha256:" + hex64('a'), ExpectedAfter: "sha256:" + hex64('b'),
				ExpectedChanges: []skills.PathChange{{Path: "repo/f", After: &skills.PathState{Type: "file", Mode: 0o644, Digest: "sha256:" + hex64('c')}}},
				ExpectedOutcome: skills.Outcome{Phase: "Succeeded", ExitCode: &code}, Parameters: []string{"who"}},
			{Index: 2, Kind: skills.EdgePatch, Patch: &skills.PatchStep{Root: "repo", Format: "unified", Patch: &text,
				Operations: []skills.PatchOperation{{Op: "write", Path: "f", Content: &content, ContentDigest: "sha256:" + hex64('d'), ContentBytes: 2}}},
				ExpectedBefore: "sha256:" + hex64('b'), ExpectedAfter: "sha256:" + hex64('e'), ExpectedOutcome: skills.Outcome{Phase: "Applied"}},
			{Index: 3, Kind: skills.EdgeWait, Condition: &skills.ConditionEdge{Condition: "c", Result: "Satisfied"},
				ExpectedBefore: "sha256:" + hex64('e'), ExpectedAfter: "sha256:" + hex64('e'), ExpectedOutcome: skills.Outcome{Phase: "Satisfied", Code: "x"}},
		},
		InitialState:     skills.StateRef{Digest: "sha256:" + hex64('a'), Entries: []skills.StateEntry{{Path: "repo", PathState: skills.PathState{Type: "dir", Digest: "sha256:" + hex64('f')}}}},
		Capabilities:     skills.Capabilities{Profiles: []string{"echo"}, ActionIDs: []string{"a.b"}, Backends: []string{"host-local"}},
		FallbackBehavior: skills.FallbackBehavior, CreatedAt: time.Now().UTC().Truncate(time.Second)}
	spec, err := SkillSpec(m)
	if err != nil {
		t.Fatal(err)
	}
	rec := wbv1.ObjectName("rec") // a Skill spec's own members stay behind
	spec.RecordingRef = &rec
	back, err := Manifest(&spec)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, back) {
		a, _ := json.Marshal(m)
		b, _ := json.Marshal(back)
		t.Fatalf("round trip differs:\n%s\n%s", a, b)
	}
	raw, _ := json.Marshal(m)
	for _, k := range []string{`"skill_id"`, `"derived_from_trace_id"`, `"fallback_behavior"`, `"expected_before"`, `"argv"`} {
		if !json.Valid(raw) || !contains(string(raw), k) {
			t.Fatalf("manifest wire format lacks %s: %s", k, raw)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func hex64(c byte) string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

package skills

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/treehash"
	core "sensorium.dev/workbench/internal/skills"
	"sensorium.dev/workbench/internal/skillsapi"
)

// syntheticManifest crystallizes a one-edge trace over a real directory.
func syntheticManifest(t *testing.T) *core.Manifest {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644))
	hash := func() *treehash.State {
		r, err := fsaccess.OpenRoot(dir)
		must(t, err)
		defer func() { _ = r.Close() }()
		s, err := treehash.HashHostRoots(map[string]*fsaccess.Root{"repo": r}, treehash.Limits{})
		must(t, err)
		return s
	}
	before := hash()
	must(t, os.WriteFile(filepath.Join(dir, "b.txt"), []byte("b"), 0o644))
	after := hash()
	ch, err := core.Changes(core.StateEntries(before), core.StateEntries(after))
	must(t, err)
	argv := []string{"/usr/bin/touch", "b.txt"}
	ad, _ := actuation.Digest(argv)
	tr := &core.Trace{Schema: core.TraceSchema, TraceID: core.NewID(), Backend: "host-local",
		InitialState: core.StateRef{Digest: before.Digest, Entries: core.StateEntries(before)}}
	must(t, tr.AppendEdge(core.Edge{Kind: core.EdgeCommand, Object: "c1", Backend: "host-local", StateBefore: before.Digest, StateAfter: after.Digest, Changes: ch,
		Command: &core.CommandEdge{Profile: "p", Argv: argv, ArgvDigest: ad, Cwd: core.Cwd{Root: "repo"}},
		Outcome: core.Outcome{Phase: "Succeeded", ExitCode: ptr(int32(0))}, Authorization: core.Authorization{Kind: core.AuthProfile, Ref: "p"}}))
	m, err := core.Crystallize(tr, core.CrystallizeOptions{Name: "Touch b", Parameters: []core.ParamSpec{{Name: "file", Value: "b.txt"}}, Now: time.Now()})
	must(t, err)
	return m
}

// The three kinds install with their schemas; a manifest survives the trip through a Skill
// object unchanged; immutability and restart rules hold.
func TestKindsRoundTrip(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	m := syntheticManifest(t)
	spec, err := skillsapi.SkillSpec(m)
	must(t, err)
	sk := &wbv1.Skill{ObjectMeta: metav1.ObjectMeta{Name: m.Slug, Namespace: ns}, Spec: spec}
	must(t, env.Client.Create(ctx, sk))
	var got wbv1.Skill
	get(t, ns, m.Slug, &got)
	back, err := skillsapi.Manifest(&got.Spec)
	must(t, err)
	back.CreatedAt, m.CreatedAt = back.CreatedAt.UTC(), m.CreatedAt.UTC()
	if !reflect.DeepEqual(back, m) {
		t.Fatalf("manifest changed through the API:\n got %+v\nwant %+v", back, m)
	}
	// The manager writes the Skill's status (observedGeneration, health) meanwhile: a
	// conflict is not the answer under test, so the update is retried on the latest version.
	var updErr error
	for range 10 {
		get(t, ns, m.Slug, &got)
		got.Spec.Description = "changed"
		if updErr = env.Client.Update(ctx, &got); !apierrors.IsConflict(updErr) {
			break
		}
	}
	if updErr == nil || !strings.Contains(updErr.Error(), "immutable") {
		t.Fatalf("a Skill spec must be immutable, got %v", updErr)
	}
	bad := sk.DeepCopy()
	bad.ResourceVersion, bad.Name = "", "bad"
	bad.Spec.SkillID = "not-a-uuid"
	if err := env.Client.Create(ctx, bad); err == nil {
		t.Fatal("a Skill with a malformed skillId must be refused")
	}

	rec := &wbv1.Recording{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns}, Spec: wbv1.RecordingSpec{EnvironmentRef: "nowhere"}}
	must(t, env.Client.Create(ctx, rec))
	if rec.Spec.DesiredState != wbv1.RecordingActive {
		t.Fatalf("desiredState defaults to Active, got %q", rec.Spec.DesiredState)
	}
	rec.Spec.DesiredState = wbv1.RecordingStopped
	must(t, env.Client.Update(ctx, rec))
	rec.Spec.DesiredState = wbv1.RecordingActive
	if err := env.Client.Update(ctx, rec); err == nil || !strings.Contains(err.Error(), "cannot be restarted") {
		t.Fatalf("a stopped recording must not restart, got %v", err)
	}

	sr := &wbv1.SkillReplay{ObjectMeta: metav1.ObjectMeta{Name: "rp", Namespace: ns}, Spec: wbv1.SkillReplaySpec{SkillRef: "x", EnvironmentRef: "y",
		Parameters: []wbv1.SkillParameterValue{{Name: "file", Value: "c.txt"}}}}
	must(t, env.Client.Create(ctx, sr))
	if sr.Spec.Mode != wbv1.SkillReplayExact || sr.Spec.StepTimeoutSeconds != 600 {
		t.Fatalf("defaults: %+v", sr.Spec)
	}
}

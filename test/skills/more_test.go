package skills

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	core "sensorium.dev/workbench/internal/skills"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// Fixture skill.authority_denied: a step needs a profile the manifest does not declare.
func TestFixtureAuthorityDenied(t *testing.T) {
	sc := loadScenario(t, "skill.authority_denied")
	w := newWorld(t)
	w.demonstrate()
	sk := w.crystallize("rec")
	narrow := &wbv1.Skill{ObjectMeta: metav1.ObjectMeta{Name: "narrow", Namespace: w.ns}, Spec: *sk.Spec.DeepCopy()}
	narrow.Spec.Capabilities.Profiles = []string{"echo", "mkdir"} // "touch" is used by step 2 but no longer declared
	must(t, env.Client.Create(context.Background(), narrow))
	w.hostEnvironment("fresh", workspaceOf(t, sc))
	sr := w.replay("rp", "narrow", "fresh", wbv1.SkillReplayExact, nil)
	st := sr.Status
	if st.Proof == nil || len(st.Denials) == 0 {
		t.Fatalf("replay status %+v", st)
	}
	assertCriteria(t, sc, map[string]any{
		"overall_verdict":           string(st.Proof.OverallVerdict),
		"gate.no_hidden_capability": string(gate(st.Proof, core.GateNoHiddenCapability).Verdict),
		"denials_non_empty":         len(st.Denials) > 0,
		"denial_code":               st.Denials[0].Code,
		"halted_at_edge":            st.HaltedAtEdge,
	})
	want := int32(sc.PassCriteria["halted_at_edge"].(float64))
	if st.Result != wbv1.SkillReplayHaltedAtEdge || st.HaltedAtEdge != want || st.ResultText != fmt.Sprintf("halted_at_edge_%d", want) {
		t.Fatalf("replay status %+v", st)
	}
	wantKStatusFailed(t, sr) // a halted replay is not healthy
	if len(st.Denials) == 0 || st.Denials[0].Code != sc.PassCriteria["denial_code"] || !strings.Contains(st.Denials[0].Message, "touch") {
		t.Fatalf("denials %+v", st.Denials)
	}
	if st.Proof == nil || st.Proof.OverallVerdict != wbv1.ProofVerdictFail || gate(st.Proof, core.GateNoHiddenCapability).Verdict != wbv1.GateVerdictFail {
		t.Fatalf("proof %+v", st.Proof)
	}
	// The denied step was never created: nothing bypassed, nothing ran.
	var c wbv1.TerminalCommand
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: "rp-2"}, &c); err == nil {
		t.Fatal("the undeclared step must not be created")
	}
	// Step 1 ran through normal admission, admitted by its profile.
	get(t, w.ns, "rp-1", &c)
	if c.Status.Phase != wbv1.CommandSucceeded || c.Status.AdmittedBy != "profile" {
		t.Fatalf("step 1: %+v", c.Status)
	}
	if st.EdgesCommitted != 1 || st.Fidelity != "failed" {
		t.Fatalf("counts %+v", st)
	}
}

// Fixture skill.redacted_export: a fake secret in command output pre-selects
// transcript_pii; none is refused; the redacted bundle validates and its hash verifies,
// byte for byte across serializations and after export/import.
func TestFixtureRedactedExport(t *testing.T) {
	sc := loadScenario(t, "skill.redacted_export")
	w := newWorld(t)
	dir := seedDir(t)
	must(t, os.MkdirAll(filepath.Join(dir, "config"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "config", "app.env"), []byte("AWS_ACCESS_KEY_ID="+fakeAWSKey+"\n"), 0o644))
	must(t, env.Client.Create(context.Background(), &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "cat", Namespace: w.ns},
		Spec: wbv1.CommandProfileSpec{Executable: "/bin/cat", AllowedArgPrefixes: []string{"config/"}, AllowedRoots: []string{"repo"},
			MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20}}))
	w.demonstrateIn(dir, func() { w.run("s", "c4", "cat", "/bin/cat", "config/app.env") })
	sk := w.crystallize("rec")
	ctx := context.Background()
	_, err := w.c.ExportBundle(ctx, wbclient.ExportRequest{Skill: sk.Name, Profile: core.RedactionNone, WorkbenchVersion: "test"}, w.nodeTrace)
	noneCode := wbclient.CodeOf(err)
	b, err := w.c.ExportBundle(ctx, wbclient.ExportRequest{Skill: sk.Name, WorkbenchVersion: "test"}, w.nodeTrace)
	must(t, err)
	indented, err := core.Marshal(b)
	must(t, err)
	_, importErr := core.Import(indented)
	h, _ := core.ComputeHash(b)
	assertCriteria(t, sc, map[string]any{
		"preselected_profile":       string(b.RedactionProfile),
		"none_refused_code":         noneCode,
		"redacted_bundle_validates": importErr == nil && core.ValidateSchema(indented) == nil,
		"content_hash_verifies":     importErr == nil && h == b.ContentHash,
		"secret_absent_from_bundle": !bytes.Contains(indented, []byte(fakeAWSKey)),
		"gate.redaction_verify":     string(b.Proof.Gate(core.GateRedactionVerify).Verdict),
	})
	assertHashReproducible(t, b, indented)
	// The override exports verbatim and its proof fails the redaction gate.
	o, err := w.c.ExportBundle(ctx, wbclient.ExportRequest{Skill: sk.Name, Profile: core.RedactionNone, Override: true, WorkbenchVersion: "test"}, w.nodeTrace)
	must(t, err)
	if o.Proof.OverallVerdict != core.VerdictFail {
		t.Fatalf("override verdict %s", o.Proof.OverallVerdict)
	}
}

// assertHashReproducible: the content hash is reproduced byte for byte by two independent
// serializations (typed and generic, indented and compact) and after export → import →
// export again.
func assertHashReproducible(t *testing.T, b *core.Bundle, indented []byte) {
	t.Helper()
	compact, err := json.Marshal(b)
	must(t, err)
	typed, err := core.CanonicalTyped(b)
	must(t, err)
	g1, err := core.CanonicalGeneric(indented)
	must(t, err)
	g2, err := core.CanonicalGeneric(compact)
	must(t, err)
	if !bytes.Equal(typed, g1) || !bytes.Equal(g1, g2) {
		t.Fatal("canonical forms differ between serializations")
	}
	imp, err := core.Import(indented)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	if h, _ := core.ComputeHash(imp); h != b.ContentHash {
		t.Fatalf("hash after import %s, exported %s", h, b.ContentHash)
	}
	again, err := core.Marshal(imp)
	must(t, err)
	imp2, err := core.Import(again)
	if err != nil || imp2.ContentHash != b.ContentHash {
		t.Fatalf("second round trip: %v", err)
	}
	// The CLI's import path creates a Skill from the bundle without running anything.
	w := &world{t: t}
	_ = w
}

// A workspace changed out of band halts replay at the right edge: the change lands while
// the replay's patch step (edge 4) awaits approval.
func TestOutOfBandChangeHaltsReplay(t *testing.T) {
	w := newWorld(t)
	w.demonstrate()
	sk := w.crystallize("rec")
	target := seedDir(t)
	w.hostEnvironment("fresh", target)
	sr := w.replay("rp", sk.Name, "fresh", wbv1.SkillReplayExact, func() {
		var fp wbv1.FilePatch
		eventually(t, time.Minute, "the replay's patch step awaiting approval", func() (bool, string) {
			err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: "rp-4"}, &fp)
			return err == nil, fmt.Sprint(err)
		})
		must(t, os.WriteFile(filepath.Join(target, "stray.txt"), []byte("changed out of band\n"), 0o644))
		w.approve("rp-4")
	})
	st := sr.Status
	if st.Result != wbv1.SkillReplayHaltedAtEdge || st.HaltedAtEdge != 4 || st.ResultText != "halted_at_edge_4" || st.EdgesCommitted != 3 {
		t.Fatalf("replay status %+v", st)
	}
	wantKStatusFailed(t, sr)
	if len(st.Surprises) != 1 {
		t.Fatalf("surprises %+v", st.Surprises)
	}
	s := st.Surprises[0]
	if s.Edge != 4 || s.Kind != core.SurpriseStateBefore || !s.Halted || string(s.ExpectedHash) != string(sk.Spec.Steps[3].ExpectedBefore) || s.ObservedHash == s.ExpectedHash {
		t.Fatalf("surprise %+v", s)
	}
	if len(s.Differences) != 1 || s.Differences[0].Path != "repo/stray.txt" || s.Differences[0].Expected != nil || s.Differences[0].Observed == nil {
		t.Fatalf("differences %+v", s.Differences)
	}
	if st.Proof == nil || st.Proof.OverallVerdict != "fail" || st.Fidelity != "failed" {
		t.Fatalf("proof %+v fidelity %s", st.Proof, st.Fidelity)
	}
}

// Fixture skill.model_comparison: the same skill replayed on host-local and
// qemu-microvm.v1, two complete proofs side by side.
func TestFixtureBackendComparison(t *testing.T) {
	sc := loadScenario(t, "skill.model_comparison")
	if qemuSkip != "" {
		t.Skip(qemuSkip)
	}
	w := newWorld(t)
	w.demonstrate()
	sk := w.crystallize("rec", string(wbv1.BackendQEMUMicroVM))
	w.hostEnvironment("host", seedDir(t))
	image := applyImageManifest(t)
	iso := wbv1.IsolationClass("emulated-vm")
	must(t, env.Client.Create(context.Background(), &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: w.ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendQEMUMicroVM, Requirements: &wbv1.EnvironmentRequirements{IsolationClass: &iso},
		Roots: []wbv1.EnvironmentRoot{{Name: "repo"}}, ImageRef: ptr(image),
		Resources:    &wbv1.EnvironmentResources{VCPUs: ptr(int32(1)), MemoryMiB: ptr(int32(512))},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName}}}))
	w.ready("vm")
	host := w.replay("on-host", sk.Name, "host", wbv1.SkillReplayExact, w.approveReplayPatches("on-host", 4))
	vm := w.replay("on-vm", sk.Name, "vm", wbv1.SkillReplayStructural, w.approveReplayPatches("on-vm", 4))
	for _, r := range []*wbv1.SkillReplay{host, vm} {
		if r.Status.Proof == nil || len(r.Status.Proof.Gates) != 6 || r.Status.Proof.OverallVerdict == "" {
			t.Fatalf("%s: incomplete proof %+v", r.Name, r.Status.Proof)
		}
		t.Logf("%-8s backend=%-16s result=%-26s fidelity=%-12s verdict=%s", r.Name, r.Status.Backend, r.Status.ResultText, r.Status.Fidelity, r.Status.Proof.OverallVerdict)
		for _, d := range r.Status.Denials {
			t.Logf("    denial at edge %d: %s %s", d.Edge, d.Code, d.Message)
		}
		for _, s := range r.Status.Surprises {
			t.Logf("    surprise at edge %d: %s halted=%v %s differences=%+v", s.Edge, s.Kind, s.Halted, s.Message, s.Differences)
		}
		for _, g := range r.Status.Proof.Gates {
			t.Logf("    %-28s %-12s %s", g.ID, g.Verdict, g.Reason)
		}
	}
	// Divergence is displayed literally: a replay with surprises never reads pass.
	divergence := len(vm.Status.Surprises) == 0 || (vm.Status.ResultText != "success" || vm.Status.Proof.OverallVerdict != wbv1.ProofVerdictPass)
	assertCriteria(t, sc, map[string]any{
		"two_complete_proofs":      host.Status.Proof != nil && vm.Status.Proof != nil,
		"each_proof_has_six_gates": len(host.Status.Proof.Gates) == 6 && len(vm.Status.Proof.Gates) == 6,
		"host_local_verdict":       string(host.Status.Proof.OverallVerdict),
		"divergence_displayed":     divergence,
	})
	if vm.Status.Backend != string(wbv1.BackendQEMUMicroVM) || vm.Status.EdgesAttempted == 0 {
		t.Fatalf("vm replay %+v", vm.Status)
	}
}

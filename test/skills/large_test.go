package skills

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	core "sensorium.dev/workbench/internal/skills"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// largeFiles is the size of the "real repository" of issue 30: more than the 4,096-entry
// cap the state hash had before, as a vendored dependency tree makes it.
const largeFiles = 20_000

// largeSeedDir is seedDir plus vendor/pNNN/fNNN.txt, 20,000 files in 200 directories.
func largeSeedDir(t *testing.T) string {
	t.Helper()
	dir := seedDir(t)
	for i := range largeFiles {
		d := filepath.Join(dir, "vendor", fmt.Sprintf("p%03d", i/100))
		if i%100 == 0 {
			must(t, os.MkdirAll(d, 0o755))
		}
		must(t, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d.txt", i%100)), fmt.Appendf(nil, "module %d\n", i), 0o644))
	}
	return dir
}

// A skill is recorded and replayed on a workspace of 20,000 files through the API server
// and the node agent: the recording's states cover every file (no cap hit, no partial
// hash), the skill's manifest keeps the initial state's digest without its 20,000-entry
// listing (the object stays small), and the replay into a fresh copy of the same tree is
// exact and proves pass.
func TestRecordAndReplayOn20000Files(t *testing.T) {
	w := newWorld(t)
	start := time.Now()
	rec := w.demonstrateIn(largeSeedDir(t), nil)
	t.Logf("recorded 5 edges on %d files in %s", largeFiles, time.Since(start).Round(time.Millisecond))
	if rec.Status.Refusal != nil || rec.Status.Edges != 5 {
		t.Fatalf("recording on %d files: %+v", largeFiles, rec.Status)
	}
	tr, err := w.c.Trace(context.Background(), rec, w.nodeTrace)
	must(t, err)
	if p := tr.Problems(); len(p) > 0 {
		t.Fatalf("trace: %v", p)
	}
	if tr.InitialState.Entries != nil || !actuation.IsDigest(tr.InitialState.Digest) {
		t.Fatalf("a %d-file initial state must keep its digest and drop its listing (%d entries)", largeFiles, len(tr.InitialState.Entries))
	}
	if len(tr.Edges[0].Changes) != 1 || tr.Edges[0].Changes[0].Path != "repo/build" {
		t.Fatalf("mkdir's changes on the large tree: %+v", tr.Edges[0].Changes)
	}
	sk := w.crystallize("rec")
	w.hostEnvironment("fresh", largeSeedDir(t))
	start = time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go w.approveWhenCreated("rp-4", stop) // the replay may halt before step 4: WaitReplay then reports why
	sr := w.replay("rp", sk.Name, "fresh", wbv1.SkillReplayExact, nil)
	t.Logf("replayed on %d files in %s", largeFiles, time.Since(start).Round(time.Millisecond))
	st := sr.Status
	if st.Result != wbv1.SkillReplaySuccess || st.ResultText != "success" || st.EdgesCommitted != 5 || st.Fidelity != wbv1.ReplayFidelityExact {
		t.Fatalf("replay on %d files: %+v", largeFiles, st)
	}
	if st.Proof == nil || st.Proof.OverallVerdict != wbv1.ProofVerdict(core.VerdictPass) {
		t.Fatalf("proof %+v", st.Proof)
	}
	b, err := w.c.ExportBundle(context.Background(), wbclient.ExportRequest{Skill: sk.Name, Replay: "rp", WorkbenchVersion: "test"}, w.nodeTrace)
	must(t, err)
	raw, err := core.Marshal(b)
	must(t, err)
	if _, err := core.Import(raw); err != nil {
		t.Fatalf("the bundle of a %d-file skill must import: %v", largeFiles, err)
	}
}

// The operator's per-Environment cap: an environment whose spec.recording.maxEntries is
// below its tree refuses recording with state-tree-too-large (no partial hash); the API
// server refuses a cap above the ceiling.
func TestEnvironmentRecordingCaps(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	over := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "over", Namespace: w.ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(seedDir(t))}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName}, Recording: &wbv1.EnvironmentRecordingLimits{MaxEntries: ptr(int32(1_000_001))}}}
	if err := env.Client.Create(ctx, over); err == nil {
		t.Fatal("a maxEntries above the ceiling (1,000,000) must be refused by the API server")
	}
	dir := seedDir(t)
	for i := range 20 {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), []byte("x\n"), 0o644))
	}
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "capped", Namespace: w.ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(dir)}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName}, Recording: &wbv1.EnvironmentRecordingLimits{MaxEntries: ptr(int32(10))}}}))
	w.ready("capped")
	// Bounded: a refusal the node fails to record would otherwise hang the suite here.
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err := w.c.StartRecording(startCtx, "rec", "capped", "")
	if wbclient.CodeOf(err) != string(actuation.CodeStateTreeTooLarge) {
		t.Fatalf("recording a 22-entry tree under maxEntries 10: %v", err)
	}
	var r wbv1.Recording
	get(t, w.ns, "rec", &r)
	if r.Status.Refusal == nil || r.Status.Refusal.Code != string(actuation.CodeStateTreeTooLarge) {
		t.Fatalf("recording status %+v", r.Status)
	}
}

// approveWhenCreated approves FilePatch name as soon as it exists, until stop is closed
// (as an operator watching for it would; no test assertion runs here).
func (w *world) approveWhenCreated(name string, stop <-chan struct{}) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		var fp wbv1.FilePatch
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &fp); err != nil {
			continue
		}
		orig := fp.DeepCopy()
		fp.Spec.Approval = "Approved"
		if env.Client.Patch(context.Background(), &fp, client.MergeFrom(orig)) == nil {
			return
		}
	}
}

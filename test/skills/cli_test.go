package skills

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"sensorium.dev/workbench/internal/cli"
	core "sensorium.dev/workbench/internal/skills"
	"sensorium.dev/workbench/internal/test/aggtest"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// kw runs `kubectl workbench args...` in process against the suite's API server.
func kw(t *testing.T, kubeconfig, ns string, args ...string) (string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...),
		genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return out.String() + errOut.String(), code
}

// The CLI drives the loop: record start/stop, skill replay (its exit status is the proof
// verdict), skill show (verdicts printed literally), skill import (verifies, creates the
// Skill, runs nothing). Crystallize and export download the trace through the aggregated
// API (test/cli covers that route); here the trace comes from the node's store.
func TestCLILoop(t *testing.T) {
	w := newWorld(t)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, aggtest.Kubeconfig(env.Config, kc))
	w.hostEnvironment("demo", seedDir(t))
	w.session("s", "demo")
	out, code := kw(t, kc, w.ns, "record", "start", "rec", "-e", "demo")
	if code != 0 || !strings.Contains(out, "recording/rec recording environment demo") {
		t.Fatalf("record start: %d %s", code, out)
	}
	w.run("s", "c1", "mkdir", "/bin/mkdir", "build")
	w.run("s", "c2", "touch", "/bin/touch", "build/out.txt")
	out, code = kw(t, kc, w.ns, "record", "stop", "rec")
	if code != 0 || !strings.Contains(out, "2 edges (2 commands") || !strings.Contains(out, "artifact/rec-trace sha256:") {
		t.Fatalf("record stop: %d %s", code, out)
	}
	sk, err := w.c.Crystallize(context.Background(), wbclient.CrystallizeRequest{Recording: "rec", SkillName: "mk", DisplayName: "Make build"}, w.nodeTrace)
	must(t, err)

	out, code = kw(t, kc, w.ns, "skill", "show", sk.Name)
	if code != 0 || !strings.Contains(out, "no proof of replay fidelity yet") || !strings.Contains(out, "step 1") {
		t.Fatalf("skill show before replay: %d %s", code, out)
	}
	w.hostEnvironment("fresh", seedDir(t))
	out, code = kw(t, kc, w.ns, "skill", "replay", sk.Name, "-e", "fresh", "--name", "rp")
	if code != 0 || !strings.Contains(out, "result     success") || !strings.Contains(out, "verdict    pass") {
		t.Fatalf("skill replay: %d %s", code, out)
	}
	// A replay into a workspace that differs: structural mode completes with surprises and
	// the verdict is partial — printed as not proven, exit status 3, never success.
	other := seedDir(t)
	must(t, os.WriteFile(filepath.Join(other, "extra.txt"), []byte("x"), 0o644))
	w.hostEnvironment("other", other)
	out, code = kw(t, kc, w.ns, "skill", "replay", sk.Name, "-e", "other", "--name", "rp2", "--mode", "structural")
	if code != 3 || !strings.Contains(out, "completed_with_surprises") || !strings.Contains(out, "partial — NOT proven") || strings.Contains(out, "verdict    pass") {
		t.Fatalf("partial replay: %d %s", code, out)
	}
	out, code = kw(t, kc, w.ns, "skill", "show", sk.Name)
	if code != 0 || !strings.Contains(out, "skillreplay/rp ") || !strings.Contains(out, "skillreplay/rp2 ") {
		t.Fatalf("skill show: %d %s", code, out)
	}

	// Import verifies and creates the Skill; a tampered bundle is refused.
	b, err := w.c.ExportBundle(context.Background(), wbclient.ExportRequest{Skill: sk.Name, Replay: "rp", WorkbenchVersion: "test"}, w.nodeTrace)
	must(t, err)
	raw, err := core.Marshal(b)
	must(t, err)
	file := filepath.Join(t.TempDir(), "mk.v1.skill.json")
	must(t, os.WriteFile(file, raw, 0o600))
	out, code = kw(t, kc, w.ns, "skill", "import", "-f", file, "--create", "--name", "imported")
	if code != 0 || !strings.Contains(out, "verified: content_hash "+b.ContentHash) || !strings.Contains(out, "created     skill/imported") {
		t.Fatalf("skill import: %d %s", code, out)
	}
	must(t, os.WriteFile(file, bytes.Replace(raw, []byte(`"Make build"`), []byte(`"Make bui1d"`), 1), 0o600))
	out, code = kw(t, kc, w.ns, "skill", "import", "-f", file)
	if code == 0 || !strings.Contains(out, "bundle-hash-mismatch") {
		t.Fatalf("tampered import: %d %s", code, out)
	}
}

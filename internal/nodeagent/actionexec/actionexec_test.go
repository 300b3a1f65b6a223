package actionexec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/artifacts"
	"sensorium.dev/workbench/internal/platform/artifactout"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/platform/writecap"
)

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper()
	os.Exit(m.Run())
}

type fx struct {
	work, root, scripts string
	store               *artifacts.Store
}

func newFx(t *testing.T) *fx {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("action envelopes mount areas and start sandboxes: run as root (as CI does)")
	}
	f := &fx{work: t.TempDir(), root: t.TempDir(), scripts: t.TempDir()}
	if err := os.WriteFile(filepath.Join(f.root, "input.txt"), []byte("workspace input\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := artifacts.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	f.store = s
	return f
}

func (f *fx) script(t *testing.T, name, body string) (string, string) {
	t.Helper()
	p := filepath.Join(f.scripts, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(body))
	return p, hex.EncodeToString(sum[:])
}

// run prepares, runs and finishes env.
func (f *fx) run(t *testing.T, env Envelope, between func()) (procexec.Result, Capture, error) {
	t.Helper()
	if env.Timeout == 0 {
		env.Timeout = 30 * time.Second
	}
	if env.StdoutBytes == 0 {
		env.StdoutBytes, env.StderrBytes = 64<<10, 64<<10
	}
	env.ReadableRoots = append(env.ReadableRoots, f.root)
	r, err := Prepare(env, Options{WorkBase: f.work, Store: f.store})
	if err != nil {
		return procexec.Result{}, Capture{}, err
	}
	if between != nil {
		between()
	}
	res, err := procexec.NewRunner(procexec.Limits{}).Run(context.Background(), r.Spec())
	if err != nil {
		r.Abort()
		t.Fatalf("run: %v", err)
	}
	c, err := r.Finish(res.ExitCode != 0)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	t.Logf("exit %d stdout %q stderr %q capture %+v", res.ExitCode, res.Output, res.Stderr, c)
	if ents, _ := os.ReadDir(f.work); len(ents) != 0 {
		t.Errorf("per-run state left behind: %v", ents)
	}
	return res, c, nil
}

func sh(script string) (Executable, []string) {
	return Executable{Kind: "binary", Path: "/bin/sh"}, []string{"sh", "-c", script}
}

func TestC1ReadOnlyWithScratch(t *testing.T) {
	f := newFx(t)
	ex, argv := sh(`cat ` + f.root + `/input.txt; echo x > ` + f.root + `/new || echo ro; echo scratch > $TMPDIR/s && cat $TMPDIR/s; pwd`)
	res, c, err := f.run(t, Envelope{Class: "C1", Effects: []string{EffectRead}, Executable: ex, Argv: argv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Output)
	for _, w := range []string{"workspace input", "ro", "scratch", "/tmp"} {
		if !strings.Contains(out, w) {
			t.Errorf("output %q lacks %q", out, w)
		}
	}
	if _, err := os.Stat(filepath.Join(f.root, "new")); err == nil {
		t.Error("a C1 run wrote into the workspace")
	}
	if c.Code != "" || c.Writes != nil || c.Transcript != nil || c.Artifacts != nil {
		t.Errorf("capture %+v", c)
	}
	if !strings.Contains(string(res.Stderr), "Read-only file system") && !strings.Contains(string(res.Stderr), "ermission denied") {
		t.Errorf("stderr %q", res.Stderr)
	}
}

func TestC2PinnedScript(t *testing.T) {
	f := newFx(t)
	p, sum := f.script(t, "hello.sh", "echo from the pinned script \"$@\"\n")
	env := Envelope{Class: "C2", Effects: []string{EffectRead}, ScriptRoots: []string{f.scripts},
		Executable: Executable{Kind: "script", Path: p, Interpreter: "/bin/sh", SHA256: sum},
		Argv:       []string{"sh", p, "--params-json", `{"a":1}`}}
	// The script is edited between the check and the start: the checked bytes run.
	res, c, err := f.run(t, env, func() { _ = os.WriteFile(p, []byte("echo tampered\n"), 0o644) })
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Output); got != "from the pinned script --params-json {\"a\":1}\n" {
		t.Errorf("output %q", got)
	}
	if c.ExecutableDigest != "sha256:"+sum {
		t.Errorf("digest %q", c.ExecutableDigest)
	}
	// Now the file on disk differs from the pin: refused before anything runs.
	if _, _, err := f.run(t, env, nil); actuation.CodeOf(err) != actuation.CodeScriptHashMismatch {
		t.Errorf("edited script: %v, want %s", err, actuation.CodeScriptHashMismatch)
	}
}

func TestC2ScriptOutsideRoots(t *testing.T) {
	f := newFx(t)
	outside := filepath.Join(t.TempDir(), "evil.sh")
	if err := os.WriteFile(outside, []byte("echo evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(f.scripts, "link.sh")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	for path, code := range map[string]actuation.Code{link: actuation.CodeSymlinkEscape, outside: actuation.CodeRootNotAllowed,
		filepath.Join(f.scripts, "missing.sh"): actuation.CodeScriptExecutableMissing} {
		env := Envelope{Class: "C2", Effects: []string{EffectRead}, ScriptRoots: []string{f.scripts},
			Executable: Executable{Kind: "script", Path: path, Interpreter: "/bin/sh"}, Argv: []string{"sh", path}}
		if _, _, err := f.run(t, env, nil); string(actuation.CodeOf(err)) != string(code) {
			t.Errorf("%s: %v, want %s", path, err, code)
		}
	}
	// A script without an interpreter must be executable itself.
	p, _ := f.script(t, "noexec.sh", "#!/bin/sh\necho hi\n")
	env := Envelope{Class: "C2", Effects: []string{EffectRead}, ScriptRoots: []string{f.scripts},
		Executable: Executable{Kind: "script", Path: p}, Argv: []string{p}}
	if _, _, err := f.run(t, env, nil); actuation.CodeOf(err) != actuation.CodeScriptNotExecutable {
		t.Errorf("non-executable script: %v", err)
	}
}

func TestC6UnionOfWriteAndArtifacts(t *testing.T) {
	f := newFx(t)
	out := filepath.Join(f.root, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	ex, argv := sh(`echo report > ` + out + `/r.txt && echo '{"k":1}' > $WORKBENCH_ARTIFACT_DIR/a.json && ls ` + f.root)
	env := Envelope{Class: "C6", Effects: []string{EffectRead, EffectScopedFSWrite, EffectArtifactProduce}, Executable: ex, Argv: argv,
		WriteRoot: out, Write: &writecap.Policy{MaxBytesTotal: 1 << 20, MaxBytesPerFile: 1 << 16},
		Artifact: &artifactout.Policy{MaxCount: 2, MaxBytesPer: 1 << 16, MaxBytesTotal: 1 << 20, AllowedMediaTypes: []string{"application/json"}}}
	res, c, err := f.run(t, env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || c.Code != "" {
		t.Fatalf("exit %d capture %+v", res.ExitCode, c)
	}
	if b, err := os.ReadFile(filepath.Join(out, "r.txt")); err != nil || string(b) != "report\n" {
		t.Errorf("committed write: %q %v", b, err)
	}
	if c.Artifacts == nil || len(c.Artifacts.Artifacts) != 1 || c.Artifacts.Artifacts[0].MediaType != "application/json" {
		t.Fatalf("artifacts %+v", c.Artifacts)
	}
	if _, err := f.store.Stat(c.Artifacts.Artifacts[0].SHA256); err != nil {
		t.Errorf("artifact not promoted: %v", err)
	}
	// Egress is not one of its effects: no route anywhere.
	ex, argv = sh(`/usr/bin/curl -sS --connect-timeout 3 http://192.0.2.1/ ; echo rc=$?`)
	env.Executable, env.Argv = ex, argv
	res, _, _ = f.run(t, env, nil)
	if !strings.Contains(string(res.Output), "rc=7") {
		t.Errorf("network without the egress effect: %q", res.Output)
	}
}

func TestEnvelopeRefusals(t *testing.T) {
	f := newFx(t)
	ex, argv := sh("true")
	cases := map[string]struct {
		env  Envelope
		code actuation.Code
	}{
		"write effect without block": {Envelope{Class: "C3", Effects: []string{EffectScopedFSWrite}, Executable: ex, Argv: argv}, actuation.CodeActionClassParamsInvalid},
		"block without effect":       {Envelope{Class: "C1", Effects: []string{EffectRead}, Executable: ex, Argv: argv, Artifact: &artifactout.Policy{}}, actuation.CodeActionClassParamsInvalid},
		"unknown effect":             {Envelope{Class: "C6", Effects: []string{"telepathy"}, Executable: ex, Argv: argv}, actuation.CodeActionClassUnavailable},
		"node-provided env":          {Envelope{Class: "C1", Effects: []string{EffectRead}, Executable: ex, Argv: argv, Env: []string{"HTTPS_PROXY=http://x"}}, actuation.CodeEnvKeyForbidden},
		"write root outside roots": {Envelope{Class: "C3", Effects: []string{EffectScopedFSWrite}, Executable: ex, Argv: argv,
			WriteRoot: t.TempDir(), Write: &writecap.Policy{MaxBytesTotal: 10, MaxBytesPerFile: 10}}, actuation.CodeWorkingDirectoryForbidden},
	}
	for name, c := range cases {
		if _, _, err := f.run(t, c.env, nil); string(actuation.CodeOf(err)) != string(c.code) {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
}

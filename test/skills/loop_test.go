package skills

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/artifacts"
	wbclient "sensorium.dev/workbench/pkg/client"
	"sensorium.dev/workbench/webhooks"
)

// fakeAWSKey is AWS's documented example access key id: a fake secret.
const fakeAWSKey = "AKIAIOSFODNN7EXAMPLE"

// world is one namespace with the profiles the demonstrations use.
type world struct {
	t  *testing.T
	ns string
	c  *wbclient.Client
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ns := namespace(t)
	c, err := wbclient.New(env.Config, ns)
	must(t, err)
	w := &world{t: t, ns: ns, c: c}
	for _, p := range []struct {
		name, exe string
		prefixes  []string
	}{
		{"mkdir", "/bin/mkdir", []string{"build"}},
		{"touch", "/bin/touch", []string{"build/"}},
		{"echo", "/bin/echo", []string{"deploying", "key="}},
	} {
		must(t, env.Client.Create(context.Background(), &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: ns},
			Spec: wbv1.CommandProfileSpec{Executable: p.exe, AllowedArgPrefixes: p.prefixes, AllowedRoots: []string{"repo"},
				Env:               wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}}},
				MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20}}))
	}
	return w
}

// seedDir makes a workspace directory with the demonstration's starting content.
func seedDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp(workspace, "ws-")
	must(t, err)
	must(t, os.Chmod(d, 0o755))
	must(t, os.WriteFile(filepath.Join(d, "README.md"), []byte("hello\n"), 0o644))
	return d
}

// hostEnvironment creates a host-local environment over dir and waits until it is Ready.
func (w *world) hostEnvironment(name, dir string) {
	w.t.Helper()
	must(w.t, env.Client.Create(context.Background(), &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(dir)}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName}}}))
	w.ready(name)
}

func (w *world) ready(name string) {
	w.t.Helper()
	eventually(w.t, 3*time.Minute, "environment "+name+" Ready", func() (bool, string) {
		var e wbv1.Environment
		get(w.t, w.ns, name, &e)
		return e.Status.Phase == wbv1.EnvironmentReady, fmt.Sprintf("%+v", e.Status)
	})
}

func (w *world) session(name, envName string) {
	w.t.Helper()
	must(w.t, env.Client.Create(context.Background(), &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: wbv1.ObjectName(envName)}}))
	eventually(w.t, time.Minute, "session "+name+" Running", func() (bool, string) {
		var s wbv1.TerminalSession
		get(w.t, w.ns, name, &s)
		return s.Status.Phase == wbv1.SessionRunning, fmt.Sprintf("%+v", s.Status)
	})
}

// run runs one admitted command in session s and waits for its outcome.
func (w *world) run(session, name, profile string, argv ...string) *wbv1.TerminalCommand {
	w.t.Helper()
	must(w.t, env.Client.Create(context.Background(), &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: wbv1.ObjectName(session), ProfileRef: wbv1.ObjectName(profile), Argv: argv,
			Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 30}}))
	var c wbv1.TerminalCommand
	eventually(w.t, time.Minute, "command "+name+" outcome", func() (bool, string) {
		get(w.t, w.ns, name, &c)
		return wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions), fmt.Sprintf("%+v", c.Status)
	})
	return &c
}

// approve approves FilePatch name once it exists (as an operator would).
func (w *world) approve(name string) {
	w.t.Helper()
	var fp wbv1.FilePatch
	eventually(w.t, time.Minute, "file patch "+name+" to exist", func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &fp)
		return err == nil, fmt.Sprint(err)
	})
	orig := fp.DeepCopy()
	fp.Spec.Approval = "Approved"
	must(w.t, env.Client.Patch(context.Background(), &fp, client.MergeFrom(orig)))
}

func (w *world) patchCreate(envName, name, path, content string) {
	w.t.Helper()
	fp := &wbv1.FilePatch{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}, Spec: wbv1.FilePatchSpec{
		EnvironmentRef: wbv1.ObjectName(envName), Root: "repo", Format: wbv1.PatchFormatStructured,
		Operations: []wbv1.FileOperation{{Op: "create", Path: wbv1.RelativePath(path), Content: &content}},
		Policy:     wbv1.PatchPolicy{AllowCreate: ptr(true)}}}
	d, err := webhooks.PatchDigest(&fp.Spec)
	must(w.t, err)
	fp.Spec.Digest = wbv1.Digest(d)
	must(w.t, env.Client.Create(context.Background(), fp))
	w.approve(name)
	eventually(w.t, time.Minute, "file patch "+name+" applied", func() (bool, string) {
		var fp wbv1.FilePatch
		get(w.t, w.ns, name, &fp)
		return fp.Status.Phase == wbv1.FilePatchApplied, fmt.Sprintf("%+v", fp.Status)
	})
}

// nodeTrace reads a trace artifact's blob from the node's content-addressed store (the
// CLI downloads it through artifacts/download; this suite runs no aggregated API server).
func (w *world) nodeTrace(ctx context.Context, artifact string) ([]byte, error) {
	var a wbv1.Artifact
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: artifact}, &a); err != nil {
		return nil, err
	}
	st, err := artifacts.Open(filepath.Join(stateDir, "artifacts"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = st.Close() }()
	b, err := st.Open(string(a.Status.Digest))
	if err != nil {
		return nil, err
	}
	defer func() { _ = b.Close() }()
	return io.ReadAll(b)
}

// demonstrate records the canonical demonstration on a fresh host-local environment:
// mkdir build, touch build/out.txt, echo (with extra output), a patch creating
// greeting.txt, a wait on it. It returns the stopped Recording.
func (w *world) demonstrate(extraEcho ...string) *wbv1.Recording {
	return w.demonstrateIn(seedDir(w.t), nil, extraEcho...)
}

// demonstrateIn records in dir; between runs extra admitted commands after the echo.
func (w *world) demonstrateIn(dir string, between func(), extraEcho ...string) *wbv1.Recording {
	w.t.Helper()
	ctx := context.Background()
	w.hostEnvironment("demo", dir)
	w.session("s", "demo")
	if _, err := w.c.StartRecording(ctx, "rec", "demo", ""); err != nil {
		w.t.Fatalf("starting the recording: %v", err)
	}
	w.run("s", "c1", "mkdir", "/bin/mkdir", "build")
	w.run("s", "c2", "touch", "/bin/touch", "build/out.txt")
	echo := append([]string{"/bin/echo", "deploying"}, extraEcho...)
	w.run("s", "c3", "echo", echo...)
	if between != nil {
		between()
	}
	w.patchCreate("demo", "p1", "greeting.txt", "hello world\n")
	must(w.t, env.Client.Create(ctx, &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: w.ns}, Spec: wbv1.WaitSpec{
		Scope:     &wbv1.Scope{File: &wbv1.FileRef{EnvironmentRef: "demo", Root: "repo", Path: "greeting.txt"}},
		Condition: wbv1.WaitCondition{Kind: "file.exists"}, DeadlineSeconds: 30}}))
	eventually(w.t, time.Minute, "wait w1 satisfied and recorded", func() (bool, string) {
		var r wbv1.Recording
		get(w.t, w.ns, "rec", &r)
		return r.Status.Counts.Waits == 1, fmt.Sprintf("%+v", r.Status.Counts)
	})
	rec, err := w.c.StopRecording(ctx, "rec")
	if err != nil {
		w.t.Fatalf("stopping the recording: %v", err)
	}
	return rec
}

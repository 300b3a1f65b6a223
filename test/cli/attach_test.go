package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/stack"
	"sensorium.dev/workbench/internal/test/testkit"
)

type lockedBuffer = testkit.LockedBuffer

// attached is a running `kubectl workbench attach`.
type attached struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    lockedBuffer
	errb   lockedBuffer
	done   chan error
	cancel context.CancelFunc
}

func startAttach(t *testing.T, ns, user string, args ...string) *attached {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	a := &attached{cancel: cancel, done: make(chan error, 1)}
	a.cmd = kwCommand(ctx, ns, user, append([]string{"attach"}, args...)...)
	a.cmd.Stdout, a.cmd.Stderr = &a.out, &a.errb
	var err error
	a.stdin, err = a.cmd.StdinPipe()
	must(t, err)
	must(t, a.cmd.Start())
	go func() { a.done <- a.cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-a.done //nolint:errcheck // killed by cancel: the exit status is not under test
	})
	return a
}

// waitOut waits (at most d) until the attach's stdout contains sub.
func (a *attached) waitOut(sub string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(a.out.String(), sub) {
			return true
		}
		select {
		case err := <-a.done:
			a.done <- err // put back for the cleanup's receive (the channel holds one)
			return strings.Contains(a.out.String(), sub)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// TestAttach: `kubectl workbench attach` to a real PTY session (cat in a PTY, raw input
// OperatorOnly). The operator attaches with --stdin: a line typed into the CLI's stdin
// reaches the PTY, and the PTY's echo comes back on stdout. The agent attaches read-only
// and sees what the operator types from then on; the agent attaching with --stdin is
// refused with the forbidden exit code (77).
func TestAttach(t *testing.T) {
	if !subresourcesServed(t) {
		t.Skip("the aggregated API is not registered in this control plane (no non-loopback IPv4 address for its EndpointSlice)")
	}
	ctx := context.Background()
	ns := namespace(t)
	dir, err := os.MkdirTemp(st.Workspace, "attach-")
	must(t, err)
	environment(t, ns, "e", dir)
	must(t, st.Env.Client.Create(ctx, &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "cat", Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/bin/cat", PTY: "Allowed", AllowedRoots: []string{"repo"},
		Env:               wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "LANG", Value: "C.UTF-8"}, {Name: "PATH", Value: "/usr/bin:/bin"}}},
		MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20,
	}}))
	must(t, st.Env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "pty", Namespace: ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e", ShellProfileRef: ptrTo(wbv1.ObjectName("cat")), RawInput: wbv1.RawInputOperatorOnly}}))
	deadline := time.Now().Add(60 * time.Second)
	for {
		var s wbv1.TerminalSession
		must(t, st.Env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "pty"}, &s))
		if s.Status.Phase == wbv1.SessionRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session not Running: %+v", s.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The agent watches read-only.
	viewer := startAttach(t, ns, agentUser, "pty")
	op := startAttach(t, ns, operatorUser, "pty", "--stdin")
	// The stream opens asynchronously: type until the echo shows (each line is one frame).
	echoed := false
	for i := 0; i < 50 && !echoed; i++ {
		if _, err := io.WriteString(op.stdin, "typed-by-operator\n"); err != nil {
			t.Fatalf("writing to the operator's attach: %v\nstderr: %s", err, op.errb.String())
		}
		echoed = op.waitOut("typed-by-operator", 200*time.Millisecond)
	}
	if !echoed {
		t.Fatalf("the operator's attach shows no echo of its input:\nstdout %q\nstderr %s", op.out.String(), op.errb.String())
	}
	// The read-only stream shows output from the moment it opened: type new lines until
	// one reaches it.
	seen := false
	for i := 0; i < 100 && !seen; i++ {
		if _, err := io.WriteString(op.stdin, fmt.Sprintf("for-the-viewer-%d\n", i)); err != nil {
			t.Fatalf("writing to the operator's attach: %v\nstderr: %s", err, op.errb.String())
		}
		seen = viewer.waitOut("for-the-viewer-", 300*time.Millisecond)
	}
	if !seen {
		t.Fatalf("the read-only attach shows nothing of the session:\nstdout %q\nstderr %s", viewer.out.String(), viewer.errb.String())
	}
	select {
	case err := <-viewer.done:
		t.Fatalf("the read-only attach ended: %v\n%s", err, viewer.errb.String())
	default:
	}

	// The agent may not send keystrokes.
	r := kw(t, ns, agentUser, "attach", "pty", "--stdin")
	if r.code != 77 {
		t.Fatalf("the agent attaching with --stdin must exit 77 (forbidden): %s", r)
	}
	must(t, op.stdin.Close())
}

func ptrTo[T any](v T) *T { return &v }

// TestVMEnvironmentProgress: `kubectl workbench env create` of a qemu-microvm.v1
// environment (a real TCG guest from bin/guest) shows its progress, one line per step when
// stderr is not a terminal, until the VM has booted and the environment is Ready; `env rm`
// removes it.
func TestVMEnvironmentProgress(t *testing.T) {
	if stack.QEMUSkip != "" {
		t.Skip(stack.QEMUSkip)
	}
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "bin", "guest", "imagemanifest.yaml"))
	must(t, err)
	var im wbv1.ImageManifest
	must(t, yaml.UnmarshalStrict(raw, &im))
	if err := st.Env.Client.Create(ctx, &im); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ns := namespace(t)
	r := kw(t, ns, operatorUser, "env", "create", "vm", "--backend", "qemu-microvm.v1", "--image", im.Name, "--root", "work=", "--isolation", "emulated-vm")
	if r.code != 0 || !strings.Contains(r.stdout, "environment/vm Ready") {
		t.Fatalf("env create of a VM: %s", r)
	}
	var steps []string
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if strings.Contains(l, "environment/vm ") {
			steps = append(steps, l)
		}
	}
	if len(steps) < 2 || strings.Contains(steps[0], " Ready") {
		t.Fatalf("env create must show progress before Ready (one line per step), got:\n%s", r.stderr)
	}
	t.Logf("progress:\n%s", strings.Join(steps, "\n"))
	if r := kw(t, ns, operatorUser, "env", "rm", "vm"); r.code != 0 {
		t.Fatalf("env rm: %s", r)
	}
	var e wbv1.Environment
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := st.Env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "vm"}, &e)
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the VM environment was not removed: %v %+v", err, e.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

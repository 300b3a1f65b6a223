package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// readyFixtureEnvironment creates fixture-copy.v1 environment e with root repo copied from
// src, and waits until it is Ready.
func readyFixtureEnvironment(t *testing.T, ns, src string) {
	t.Helper()
	must(t, env.Client.Create(context.Background(), &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Source: ptr(src)}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
	}}))
	waitEnvReady(t, ns, "e")
}

// TestExportArtifactOfFixtureCopy: an export of a subtree of a fixture-copy.v1 root (the
// managed copy, exported by its backend through the copy's fixture.Manager) is the same
// deterministic tar as a host-local root's: the subtree's entries only, in walk order.
func TestExportArtifactOfFixtureCopy(t *testing.T) {
	ctx := context.Background()
	ns, src := namespace(t), workDir(t)
	must(t, os.MkdirAll(filepath.Join(src, "out", "deep"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "out", "report.txt"), []byte("report\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "out", "deep", "data.bin"), []byte{0, 1, 2}, 0o600))
	must(t, os.WriteFile(filepath.Join(src, "secret.txt"), []byte("not exported\n"), 0o600))
	readyFixtureEnvironment(t, ns, src)
	// What the export reads is the copy, not the source.
	must(t, os.WriteFile(filepath.Join(src, "out", "report.txt"), []byte("changed after the copy\n"), 0o644))
	entries := exportedOut(ctx, t, ns, "x")
	if got := entryNames(entries); got != "out/deep/,out/deep/data.bin,out/report.txt" {
		t.Fatalf("tar entries = %s", got)
	}
	if got := string(entries[2].data); got != "report\n" {
		t.Fatalf("out/report.txt in the export = %q, want the copy's %q", got, "report\n")
	}
}

// TestFixtureCopyRefusesPTY: a PTY session on a fixture-copy.v1 environment is refused
// with capability-mismatch and the backend's message — also when the shell profile allows
// no root of the environment (the backend's refusal comes before the root check, as when
// the sessions room named the backend) — and nothing is left open.
func TestFixtureCopyRefusesPTY(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyFixtureEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "sh", "/bin/cat", nil, nil, func(s *wbv1.CommandProfileSpec) { s.PTY = "Allowed" })))
	must(t, env.Client.Create(ctx, profile(ns, "sh-other", "/bin/cat", nil, nil, func(s *wbv1.CommandProfileSpec) {
		s.PTY, s.AllowedRoots = "Allowed", []string{"other"}
	})))
	for _, p := range []string{"sh", "sh-other"} {
		must(t, env.Client.Create(ctx, session(ns, p, "e", func(s *wbv1.TerminalSessionSpec) { s.ShellProfileRef = ptr(wbv1.ObjectName(p)) })))
	}
	for _, name := range []string{"sh", "sh-other"} {
		var s wbv1.TerminalSession
		eventually(t, 30*time.Second, "session "+name+" refused", func() (bool, string) {
			get(t, ns, name, &s)
			return s.Status.Refusal != nil, fmt.Sprintf("%+v", s.Status)
		})
		if r := s.Status.Refusal; string(r.Code) != string(actuation.CodeCapabilityMismatch) ||
			r.Message != "fixture-copy.v1 is a managed copy, not a process sandbox: no PTY" {
			t.Errorf("session %s refused %s %q, want %s and the no-PTY message", name, r.Code, r.Message, actuation.CodeCapabilityMismatch)
		}
		if s.Status.Phase == wbv1.SessionRunning {
			t.Errorf("session %s is %s", name, s.Status.Phase)
		}
	}
}

package nodeagent

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends/qemumicrovm"
	"sensorium.dev/workbench/internal/platform/loopdisk"
	"sensorium.dev/workbench/internal/test/kstate"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// TestQEMUFullSystemGitSource (issue 28 item 1): a git source on a full-system
// qemu-microvm.v1 Environment is materialized by the node into the VM's working disk
// before its first boot. Through the API server and a node-agent process: the guest sees
// the commit's tree (content, symlink, .git at the commit) under its root and can write
// there; status.roots reports the resolved commit, entries and bytes; nothing stays
// mounted on the host. A wrong commit on a second VM is refused with
// source-commit-not-found and leaves no working disk.
func TestQEMUFullSystemGitSource(t *testing.T) {
	requireQEMU(t)
	if err := loopdisk.Check(); err != nil {
		t.Skipf("no loop devices here: %v", err)
	}
	image := systemManifest(t)
	ctx := context.Background()
	const node = "node-vmsrc"
	repos := t.TempDir()
	repo, ids := sourcetest.Repo(t, repos, "repo", map[string]string{"README.md": "hello\n", "src/main.go": "package main\n", "src/link": "->main.go"})
	state, proc := startFullSystemNode(t, node, "wb-vsrc-", 3400, fmt.Sprintf("sources:\n  allowedFileDirs: [%q]\n", repos),
		func(wbv1.BackendCapabilitySpec) bool { return true })
	ns := namespace(t)
	newEnv := func(name, commit string) *wbv1.Environment {
		return fullSystemEnv(ns, name, node, image, wbv1.EnvironmentRoot{Name: "repo", Git: &wbv1.GitRootSource{URL: "file://" + repo, Commit: ptr(commit)}})
	}
	stopVMsAtEnd(t, ns, state)

	// A commit the repository does not have: refused with its code, no disk kept.
	wrong := strings.Repeat("0", 39) + "1"
	must(t, env.Client.Create(ctx, newEnv("wrong", wrong)))
	var bad wbv1.Environment
	eventually(t, 120*time.Second, "the wrong commit refused with source-commit-not-found", func() (bool, string) {
		get(t, ns, "wrong", &bad)
		c := readyOf(&bad)
		return c.Status == metav1.ConditionFalse && strings.HasPrefix(c.Message, "source-commit-not-found"), fmt.Sprintf("%+v\nagent log:\n%s", bad.Status, proc.LogTail())
	})
	if len(bad.Status.Roots) != 1 || bad.Status.Roots[0].Reason != "source-commit-not-found" {
		t.Fatalf("status.roots of the refused VM: %+v", bad.Status.Roots)
	}
	if exists(filepath.Join(state, qemumicrovm.DisksDir, string(bad.UID)+".img")) {
		t.Fatal("the refused source left its working disk")
	}
	if procs := vmProcessesIn(t, state, string(bad.UID)); len(procs) != 0 {
		t.Fatalf("a VM was booted for the refused source: %v", procs)
	}
	must(t, env.Client.Delete(ctx, &bad))

	start := time.Now()
	must(t, env.Client.Create(ctx, newEnv("sys", ids[0])))
	must(t, env.Client.Create(ctx, session(ns, "s", "sys")))
	var e wbv1.Environment
	eventually(t, systemBootWithin, "sourced full-system VM Ready and session Running", func() (bool, string) {
		return kstate.ReadyAndRunning(t, env.Client, ns, "sys", "s", &e)
	})
	t.Logf("sourced full-system Environment create → Ready %v; status.roots %+v", time.Since(start).Round(time.Millisecond), e.Status.Roots)
	if len(e.Status.Roots) != 1 {
		t.Fatalf("status.roots: %+v", e.Status.Roots)
	}
	if r := e.Status.Roots[0]; r.Kind != "git" || r.Resolved != ids[0] || r.Reason != "" || r.Entries == 0 || r.Bytes == 0 {
		t.Fatalf("status.roots[0]: %+v", r)
	}
	if m, err := loopdisk.MountsUnder(state); err != nil || len(m) != 0 {
		t.Fatalf("mounts left under the state directory after the fill: %+v %v", m, err)
	}
	if exists(filepath.Join(state, "vm-fill", string(e.UID))) {
		t.Fatal("the fill's mount point is left")
	}

	// In the guest: the commit's tree beneath the root (cwd = the root).
	phase := func(name, exe string, argv ...string) wbv1.CommandPhase {
		t.Helper()
		return runProfiled(t, ns, "s", name, 60, exe, argv...).Status.Phase
	}
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"readme", []string{"/usr/bin/grep", "-qx", "hello", "README.md"}},
		{"main", []string{"/usr/bin/grep", "-qx", "package main", "src/main.go"}},
		{"link", []string{"/usr/bin/test", "-L", "src/link"}},
		{"head", []string{"/usr/bin/grep", "-q", ids[0], ".git/HEAD"}},
		{"hooks", []string{"/usr/bin/test", "-d", ".git/hooks"}},
		{"write", []string{"/usr/bin/cp", "README.md", "copy.txt"}},
		{"written", []string{"/usr/bin/grep", "-qx", "hello", "copy.txt"}},
	} {
		if p := phase(c.name, c.argv[0], c.argv[1:]...); p != wbv1.CommandSucceeded {
			t.Fatalf("in the guest %v: %s", c.argv, p)
		}
	}
	// The check itself can fail: a file the commit does not hold is not there.
	if p := phase("absent", "/usr/bin/test", "-e", "not-in-the-commit"); p == wbv1.CommandSucceeded {
		t.Fatal("test -e of a file the commit lacks succeeded: the checks above prove nothing")
	}
}

func readyOf(e *wbv1.Environment) metav1.Condition {
	for _, c := range e.Status.Conditions {
		if c.Type == wbv1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}

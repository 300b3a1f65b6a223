package nodeagent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/dpclient"
	"sensorium.dev/workbench/internal/test/kstate"
)

// Workspace hygiene (issue 7 item 3), through the API server and the running agent.

// setPatchPolicy replaces environment e's host-owned patch policy (as its owner would).
func setPatchPolicy(t *testing.T, ns string, pol *wbv1.EnvironmentPatchPolicy) {
	t.Helper()
	update(t, env.Client, ns, "e", func(e *wbv1.Environment) { e.Spec.PatchPolicy = pol })
}

func rejectedWith(t *testing.T, ns, name, code string) {
	t.Helper()
	fp := patchPhase(t, ns, name, "Rejected")
	if fp.Status.Refusal == nil || fp.Status.Refusal.Code != code || len(fp.Status.ChangedFiles) != 0 {
		t.Fatalf("%s: status %+v, want refusal %s", name, fp.Status, code)
	}
}

func admissionRefused(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), code) {
		t.Fatalf("admission: %v, want a refusal with %s", err, code)
	}
}

func absent(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Fatalf("%s exists (%v): a refused patch wrote it", p, err)
	}
}

// TestFilePatchGitHooksRefused: a patch creating .git/hooks/pre-commit or changing
// .git/config is refused — at admission for structured operations, by the node for a
// unified diff — and nothing is written; the environment's owner can allow it.
func TestFilePatchGitHooksRefused(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	autoApply(t, ns)
	must(t, os.MkdirAll(filepath.Join(dir, ".git", "hooks"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, ".git", "config"), []byte("[core]\n\tbare = false\n"), 0o644))

	err := env.Client.Create(ctx, filePatch(t, ns, "hook", func(s *wbv1.FilePatchSpec) {
		s.Format, s.Policy.AllowCreate = wbv1.PatchFormatStructured, ptr(true)
		s.Operations = []wbv1.FileOperation{{Op: "create", Path: ".git/hooks/pre-commit", Content: ptr("#!/bin/sh\ntouch /tmp/pwned\n")}}
	}))
	admissionRefused(t, err, "patch-git-metadata-forbidden")
	err = env.Client.Create(ctx, filePatch(t, ns, "config", func(s *wbv1.FilePatchSpec) {
		s.Format = wbv1.PatchFormatStructured
		s.Operations = []wbv1.FileOperation{{Op: "replace", Path: ".git/config", Content: ptr("[core]\n\tfsmonitor = touch /tmp/pwned\n")}}
	}))
	admissionRefused(t, err, "patch-git-metadata-forbidden")

	// A unified diff is opaque to admission: the node refuses it before writing.
	diff := "diff --git a/.git/hooks/pre-commit b/.git/hooks/pre-commit\nnew file mode 100644\n--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n+touch /tmp/pwned\n"
	must(t, env.Client.Create(ctx, filePatch(t, ns, "hook-diff", func(s *wbv1.FilePatchSpec) {
		s.Format, s.Patch, s.Policy.AllowCreate = wbv1.PatchFormatUnified, ptr(diff), ptr(true)
	})))
	rejectedWith(t, ns, "hook-diff", "patch-git-metadata-forbidden")
	absent(t, filepath.Join(dir, ".git", "hooks", "pre-commit"))
	if got := readFile(t, filepath.Join(dir, ".git", "config")); !strings.Contains(got, "bare = false") || strings.Contains(got, "fsmonitor") {
		t.Fatalf(".git/config changed: %q", got)
	}

	// The environment's owner allows git metadata: the same diff applies.
	setPatchPolicy(t, ns, &wbv1.EnvironmentPatchPolicy{GitMetadata: ptr(wbv1.PatchPermissionAllowed)})
	must(t, env.Client.Create(ctx, filePatch(t, ns, "hook-allowed", func(s *wbv1.FilePatchSpec) {
		s.Format, s.Patch, s.Policy.AllowCreate = wbv1.PatchFormatUnified, ptr(diff), ptr(true)
	})))
	patchPhase(t, ns, "hook-allowed", "Applied")
	if got := readFile(t, filepath.Join(dir, ".git", "hooks", "pre-commit")); got != "touch /tmp/pwned\n" {
		t.Fatalf("allowed hook = %q", got)
	}
}

// TestFilePatchExecutableBitRefused: a diff creating a file with mode 100755 is refused
// with patch-executable-forbidden unless the environment allows executable files.
func TestFilePatchExecutableBitRefused(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	autoApply(t, ns)
	diff := "diff --git a/run.sh b/run.sh\nnew file mode 100755\n--- /dev/null\n+++ b/run.sh\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+id\n"
	must(t, env.Client.Create(ctx, filePatch(t, ns, "exec", func(s *wbv1.FilePatchSpec) {
		s.Format, s.Patch, s.Policy.AllowCreate = wbv1.PatchFormatUnified, ptr(diff), ptr(true)
	})))
	rejectedWith(t, ns, "exec", "patch-executable-forbidden")
	absent(t, filepath.Join(dir, "run.sh"))

	setPatchPolicy(t, ns, &wbv1.EnvironmentPatchPolicy{ExecutableFiles: ptr(wbv1.PatchPermissionAllowed)})
	must(t, env.Client.Create(ctx, filePatch(t, ns, "exec-allowed", func(s *wbv1.FilePatchSpec) {
		s.Format, s.Patch, s.Policy.AllowCreate = wbv1.PatchFormatUnified, ptr(diff), ptr(true)
	})))
	patchPhase(t, ns, "exec-allowed", "Applied")
	if st, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("allowed executable: %v %v", st, err)
	}
}

// TestFilePatchPolicyNeverWidensEnvironment: a proposer asking for allowDelete on an
// environment that does not allow deletes is refused at admission; a patch admitted while
// the environment allowed it is refused by the node once the owner withdrew it.
func TestFilePatchPolicyNeverWidensEnvironment(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	must(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("keep\n"), 0o644))
	del := func(name string) *wbv1.FilePatch {
		return filePatch(t, ns, name, func(s *wbv1.FilePatchSpec) {
			s.Format, s.Policy.AllowDelete = wbv1.PatchFormatStructured, ptr(true)
			s.Operations = []wbv1.FileOperation{{Op: "delete", Path: "keep.txt"}}
		})
	}
	admissionRefused(t, env.Client.Create(ctx, del("widen")), "patch-policy-exceeds-environment")

	setPatchPolicy(t, ns, &wbv1.EnvironmentPatchPolicy{AllowDelete: ptr(true)})
	must(t, env.Client.Create(ctx, del("narrowed-later")))
	patchPhase(t, ns, "narrowed-later", "AwaitingApproval")
	setPatchPolicy(t, ns, &wbv1.EnvironmentPatchPolicy{AllowDelete: ptr(false)})
	must(t, env.Bind(ctx, "workbench-operator", "olga", ns))
	op, err := env.As("olga")
	must(t, err)
	update(t, op, ns, "narrowed-later", func(fp *wbv1.FilePatch) { fp.Spec.Approval = "Approved" })
	rejectedWith(t, ns, "narrowed-later", "patch-policy-exceeds-environment")
	if got := readFile(t, filepath.Join(dir, "keep.txt")); got != "keep\n" {
		t.Fatalf("keep.txt = %q", got)
	}
}

// TestRootsNestedRefused: nested host roots are refused at admission with root-overlap.
func TestRootsNestedRefused(t *testing.T) {
	ns := namespace(t)
	dir := workDir(t)
	must(t, os.MkdirAll(filepath.Join(dir, "inner"), 0o755))
	err := env.Client.Create(context.Background(), &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "nested", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{
			{Name: "repo", HostPath: ptr(dir)}, {Name: "ro", HostPath: ptr(filepath.Join(dir, "inner")), Access: ptr(wbv1.RootAccessReadOnly)}},
	}})
	admissionRefused(t, err, "root-overlap")
}

// TestRootSymlinkSwapNotFollowed: an environment whose hostPath is a symlink is pinned to
// the directory it named when it became ready. After the link is swapped to another
// directory, patches, data-plane reads and commands still reach the pinned directory, and
// the environment's next pass fails it with root-changed (fail closed, never re-pinned).
func TestRootSymlinkSwapNotFollowed(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	base := workDir(t)
	real, other, link := filepath.Join(base, "real"), filepath.Join(base, "other"), filepath.Join(base, "link")
	must(t, os.MkdirAll(real, 0o755))
	must(t, os.MkdirAll(other, 0o755))
	must(t, os.WriteFile(filepath.Join(real, "a.txt"), []byte("real\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(other, "a.txt"), []byte("other\n"), 0o644))
	must(t, os.Symlink(real, link))
	// AutoApply from the start: no later spec change may race the swap below.
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(link)}},
		PatchApproval: ptr(wbv1.PatchApprovalAutoApply), NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
	}}))
	must(t, env.Client.Create(ctx, session(ns, "s", "e")))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/cat", nil, []string{"a.txt"})))
	eventually(t, 30*time.Second, "environment Ready and session Running", func() (bool, string) {
		return kstate.ReadyAndRunning(t, env.Client, ns, "e", "s", nil)
	})

	// Swap the link to the other directory. What the product does (docs/security.md): the
	// environment fails with root-changed at the node's next pass over it. Until that pass
	// (the periodic re-inspection or any change to the Environment, whichever comes first)
	// the pinned directory keeps being served; the link's new target is never reached. The
	// operations in that window therefore either reach the pinned directory or are refused
	// as unavailable — both are asserted, so the test does not depend on when the pass runs.
	must(t, os.Remove(link))
	must(t, os.Symlink(other, link))
	unavailable := func(code string) bool {
		return code == string(actuation.CodeEnvironmentUnavailable) || code == string(actuation.CodeRootChanged)
	}

	must(t, env.Client.Create(ctx, filePatch(t, ns, "fp", func(s *wbv1.FilePatchSpec) {
		s.Format = wbv1.PatchFormatStructured
		s.Operations = []wbv1.FileOperation{{Op: "replace", Path: "a.txt", Content: ptr("patched\n")}}
	})))
	fp := patchFinal(t, ns, "fp")
	want := "real\n"
	switch {
	case fp.Status.Phase == wbv1.FilePatchApplied:
		want = "patched\n"
	case fp.Status.Refusal == nil || !unavailable(fp.Status.Refusal.Code):
		t.Fatalf("patch after the swap: %+v (want Applied to the pinned directory, or refused as unavailable)", fp.Status)
	}
	if r, o := readFile(t, filepath.Join(real, "a.txt")), readFile(t, filepath.Join(other, "a.txt")); r != want || o != "other\n" {
		t.Fatalf("after the swap: real=%q other=%q (the patch may reach the pinned directory only)", r, o)
	}
	opToken := tokenFor(t, ns, "op", "workbench-operator")
	code, body, _ := dataPlane(t).Get(t, dpclient.FilesPath(ns, "e")+"?op=read&root=repo&path=a.txt", opToken)
	if code == http.StatusOK && string(body) != want {
		t.Fatalf("data-plane read after the swap: %d %s (want the pinned directory's %q)", code, body, want)
	}
	if code != http.StatusOK && !unavailable(dpclient.Code(t, body)) {
		t.Fatalf("data-plane read after the swap: %d %s (want the pinned directory or unavailable)", code, body)
	}

	// A command started now works in the pinned directory too, or is refused: never in the
	// link's new target.
	must(t, env.Client.Create(ctx, command(ns, "c", "/bin/cat", "a.txt")))
	c := waitFinal(t, ns, "c")
	switch {
	case c.Status.Phase == wbv1.CommandSucceeded:
		if got := output(t, ns, c); got != want {
			t.Fatalf("command after the swap printed %q, want the pinned directory's %q", got, want)
		}
	case c.Status.Refusal == nil || !unavailable(c.Status.Refusal.Code):
		t.Fatalf("command after the swap: %+v", c.Status)
	}

	// The environment's next pass sees the swap and fails closed: a change to the
	// Environment starts that pass now instead of at the periodic re-inspection.
	update(t, env.Client, ns, "e", func(e *wbv1.Environment) {
		if e.Annotations == nil {
			e.Annotations = map[string]string{}
		}
		e.Annotations["test/nudge"] = time.Now().Format(time.RFC3339Nano)
	})
	eventually(t, 30*time.Second, "environment failed with root-changed", func() (bool, string) {
		var e wbv1.Environment
		get(t, ns, "e", &e)
		for _, c := range e.Status.Conditions {
			if c.Type == wbv1.ConditionReady && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "root-changed") {
				return e.Status.Phase == wbv1.EnvironmentFailed, fmt.Sprintf("phase %s", e.Status.Phase)
			}
		}
		return false, fmt.Sprintf("%+v", e.Status)
	})

	// Once failed, nothing reaches either directory: a patch and a command are refused.
	must(t, env.Client.Create(ctx, filePatch(t, ns, "fp2", func(s *wbv1.FilePatchSpec) {
		s.Format = wbv1.PatchFormatStructured
		s.Operations = []wbv1.FileOperation{{Op: "replace", Path: "a.txt", Content: ptr("late\n")}}
	})))
	if fp2 := patchFinal(t, ns, "fp2"); fp2.Status.Phase != wbv1.FilePatchRejected || fp2.Status.Refusal == nil || !unavailable(fp2.Status.Refusal.Code) {
		t.Fatalf("patch on the failed environment: %+v", fp2.Status)
	}
	// A read of the failed environment is refused as unavailable: it exists and is bound
	// here, so it is never reported not-found.
	if code, body, _ := dataPlane(t).Get(t, dpclient.FilesPath(ns, "e")+"?op=read&root=repo&path=a.txt", opToken); code != http.StatusServiceUnavailable || dpclient.Code(t, body) != string(actuation.CodeEnvironmentUnavailable) {
		t.Fatalf("data-plane read of the failed environment: %d %s (want 503 environment-unavailable)", code, body)
	}
	must(t, env.Client.Create(ctx, command(ns, "c2", "/bin/cat", "a.txt")))
	if c2 := waitFinal(t, ns, "c2"); c2.Status.Phase != wbv1.CommandRefused && c2.Status.Phase != wbv1.CommandFailed {
		t.Fatalf("command on the failed environment: %+v", c2.Status)
	}
	if r, o := readFile(t, filepath.Join(real, "a.txt")), readFile(t, filepath.Join(other, "a.txt")); r != want || o != "other\n" {
		t.Fatalf("after the failure: real=%q other=%q", r, o)
	}
}

// patchFinal waits until FilePatch ns/name is Applied or Rejected.
func patchFinal(t *testing.T, ns, name string) *wbv1.FilePatch {
	t.Helper()
	var fp wbv1.FilePatch
	eventually(t, 30*time.Second, "file patch "+name+" final", func() (bool, string) {
		get(t, ns, name, &fp)
		return wbv1.FilePatchIsFinal(fp.Status.Phase), fmt.Sprintf("%+v", fp.Status)
	})
	return &fp
}

package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/webhooks"
)

func sha(s string) wbv1.Digest {
	sum := sha256.Sum256([]byte(s))
	return wbv1.Digest("sha256:" + hex.EncodeToString(sum[:]))
}

// autoApply switches environment e to AutoApply patches.
func autoApply(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	var e wbv1.Environment
	get(t, ns, "e", &e)
	base := e.DeepCopy()
	e.Spec.PatchApproval = ptr(wbv1.PatchApprovalAutoApply)
	must(t, env.Client.Patch(ctx, &e, client.MergeFrom(base)))
}

// filePatch builds a FilePatch on root repo of environment e with its declared digest.
func filePatch(t *testing.T, ns, name string, mut func(*wbv1.FilePatchSpec)) *wbv1.FilePatch {
	t.Helper()
	fp := &wbv1.FilePatch{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.FilePatchSpec{EnvironmentRef: "e", Root: "repo"}}
	mut(&fp.Spec)
	d, err := webhooks.PatchDigest(&fp.Spec)
	must(t, err)
	fp.Spec.Digest = wbv1.Digest(d)
	return fp
}

func patchPhase(t *testing.T, ns, name string, want wbv1.FilePatchPhase) *wbv1.FilePatch {
	t.Helper()
	var fp wbv1.FilePatch
	eventually(t, 30*time.Second, "file patch "+name+" "+string(want), func() (bool, string) {
		get(t, ns, name, &fp)
		return fp.Status.Phase == want, fmt.Sprintf("%+v", fp.Status)
	})
	return &fp
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return string(b)
}

// TestFilePatchStructuredAutoApplied: on an AutoApply environment a structured patch is
// applied once, and its status carries each file's digest before and after.
func TestFilePatchStructuredAutoApplied(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	autoApply(t, ns)
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one\n"), 0o644))
	must(t, env.Client.Create(ctx, filePatch(t, ns, "fp", func(s *wbv1.FilePatchSpec) {
		s.Format = wbv1.PatchFormatStructured
		s.Policy.AllowCreate = ptr(true)
		s.Operations = []wbv1.FileOperation{
			{Op: "replace", Path: "a.txt", Content: ptr("two\n")},
			{Op: "create", Path: "sub/b.txt", Content: ptr("new\n")},
		}
	})))
	fp := patchPhase(t, ns, "fp", "Applied")
	want := []wbv1.ChangedFile{
		{Path: "a.txt", Op: "replace", DigestBefore: sha("one\n"), DigestAfter: sha("two\n")},
		{Path: "sub/b.txt", Op: "create", DigestAfter: sha("new\n")},
	}
	if fmt.Sprint(fp.Status.ChangedFiles) != fmt.Sprint(want) || fp.Status.Refusal != nil {
		t.Fatalf("status = %+v, want changed files %+v", fp.Status, want)
	}
	wantKStatus(t, fp, kstatus.CurrentStatus)
	if a, b := readFile(t, filepath.Join(dir, "a.txt")), readFile(t, filepath.Join(dir, "sub", "b.txt")); a != "two\n" || b != "new\n" {
		t.Fatalf("files: a=%q b=%q", a, b)
	}
}

// TestFilePatchAwaitsOperatorApproval: on an environment that requires approval the patch
// waits, touching nothing, until an operator approves it; then it is applied.
func TestFilePatchAwaitsOperatorApproval(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	target := filepath.Join(dir, "c.txt")
	must(t, os.WriteFile(target, []byte("old\n"), 0o644))
	must(t, env.Client.Create(ctx, filePatch(t, ns, "fp", func(s *wbv1.FilePatchSpec) {
		s.Format = wbv1.PatchFormatStructured
		s.Operations = []wbv1.FileOperation{{Op: "replace", Path: "c.txt", Content: ptr("approved\n")}}
	})))
	patchPhase(t, ns, "fp", "AwaitingApproval")
	if got := readFile(t, target); got != "old\n" {
		t.Fatalf("an unapproved patch changed the file: %q", got)
	}
	must(t, env.Bind(ctx, "workbench-operator", "olga", ns))
	op, err := env.As("olga")
	must(t, err)
	update(t, op, ns, "fp", func(fp *wbv1.FilePatch) { fp.Spec.Approval = "Approved" })
	fp := patchPhase(t, ns, "fp", "Applied")
	if len(fp.Status.ChangedFiles) != 1 || fp.Status.ChangedFiles[0].DigestAfter != sha("approved\n") {
		t.Fatalf("status = %+v", fp.Status)
	}
	if got := readFile(t, target); got != "approved\n" {
		t.Fatalf("file = %q", got)
	}
}

// TestFilePatchDirtyRejected: a unified diff whose context does not match the file is
// rejected with patch-dirty and changes nothing.
func TestFilePatchDirtyRejected(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	autoApply(t, ns)
	target := filepath.Join(dir, "d.txt")
	must(t, os.WriteFile(target, []byte("actual\n"), 0o644))
	diff := "--- a/d.txt\n+++ b/d.txt\n@@ -1 +1 @@\n-expected\n+changed\n"
	must(t, env.Client.Create(ctx, filePatch(t, ns, "fp", func(s *wbv1.FilePatchSpec) {
		s.Format = wbv1.PatchFormatUnified
		s.Patch = ptr(diff)
	})))
	fp := patchPhase(t, ns, "fp", "Rejected")
	if fp.Status.Refusal == nil || fp.Status.Refusal.Code != "patch-dirty" || len(fp.Status.ChangedFiles) != 0 {
		t.Fatalf("status = %+v", fp.Status)
	}
	wantKStatus(t, fp, kstatus.FailedStatus)
	if got := readFile(t, target); got != "actual\n" {
		t.Fatalf("a rejected patch changed the file: %q", got)
	}
}

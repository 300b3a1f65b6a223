package nodeagent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// Issue 28 item 2: results out of a workspace, through the API server and the running node
// agent.

// runGit runs git in dir as sourcetest.Git does (fixed identity, no user configuration),
// with file:// remotes allowed and any directory owner trusted.
func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return sourcetest.Git(t, dir, append([]string{"-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always", "-c", "safe.directory=*"}, args...)...)
}

// gitRepoWorkDir makes a work directory that is a git repository with one commit, as an
// operator's checkout on the node would be, and returns it with its commit.
func gitRepoWorkDir(t *testing.T) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed on this machine")
	}
	dir := workDir(t)
	must(t, os.Chmod(dir, 0o755))
	runGit(t, dir, "init", "-q")
	must(t, os.MkdirAll(filepath.Join(dir, "src"), 0o755))
	must(t, writeFile(filepath.Join(dir, "README.md"), "hello\n"))
	must(t, writeFile(filepath.Join(dir, "src", "main.go"), "package main\n\nfunc main() {}\n"))
	must(t, writeFile(filepath.Join(dir, "gone.txt"), "deleted by the agent\n"))
	runGit(t, dir, "add", "-A")
	runGit(t, dir, "commit", "-q", "-m", "base")
	return dir, runGit(t, dir, "rev-parse", "HEAD")
}

// applyToFreshClone clones src at base, applies patch with `git apply --index` and returns
// the clone.
func applyToFreshClone(t *testing.T, src, base string, patch []byte) string {
	t.Helper()
	parent := t.TempDir()
	fresh := filepath.Join(parent, "fresh")
	runGit(t, parent, "clone", "-q", src, fresh)
	runGit(t, fresh, "checkout", "-q", base)
	pf := filepath.Join(parent, "export.patch")
	must(t, os.WriteFile(pf, patch, 0o600))
	runGit(t, fresh, "apply", "--index", pf)
	return fresh
}

// sameTree fails unless every regular file of want (outside .git) exists in got with the
// same bytes, and got has no file want lacks.
func sameTree(t *testing.T, want, got string) {
	t.Helper()
	list := func(root string) map[string]string {
		m := map[string]string{}
		must(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			if d.Type().IsRegular() {
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(root, p)
				m[rel] = string(b)
			}
			return nil
		}))
		return m
	}
	w, g := list(want), list(got)
	if fmt.Sprint(w) != fmt.Sprint(g) {
		t.Fatalf("trees differ:\nworkspace %v\nafter apply %v", w, g)
	}
}

// TestPatchExportReproducesWorkspace: a command in the sandbox changes the workspace (a
// host-local root whose directory is a git repository); the git-patch export, computed by
// the agent against the repository's HEAD, applied with `git apply` to a fresh clone of the
// source reproduces the workspace. The base commit is in status; the blob is
// content-addressed. A FilePatch-restricted export holds only that patch's files.
func TestPatchExportReproducesWorkspace(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	dir, base := gitRepoWorkDir(t)
	readyEnvironment(t, ns, dir)
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/cp", nil, []string{"README.md", "NOTES.md"})))
	must(t, env.Client.Create(ctx, command(ns, "c", "/bin/cp", "README.md", "NOTES.md")))
	if c := waitFinal(t, ns, "c"); c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("command: %+v", c.Status)
	}
	must(t, writeFile(filepath.Join(dir, "src", "main.go"), "package main\n\nfunc main() { println(1) }\n"))
	must(t, os.Remove(filepath.Join(dir, "gone.txt")))
	must(t, env.Client.Create(ctx, artifact(ns, "patch", func(s *wbv1.ArtifactSpec) {
		s.Source, s.Root, s.Format = "export", ptr(wbv1.RootName("repo")), ptr(wbv1.ExportFormatGitPatch)
	})))
	a, blob := storedArtifact(t, ns, "patch")
	if a.Status.Base != base || a.Status.Files != 3 {
		t.Fatalf("status base %q files %d, want %s and 3", a.Status.Base, a.Status.Files, base)
	}
	if !bytes.HasPrefix(blob, []byte("From ")) {
		t.Fatalf("not a git-format patch:\n%s", blob)
	}
	sameTree(t, dir, applyToFreshClone(t, dir, base, blob))

	// Restricted to an applied FilePatch's files.
	autoApply(t, ns)
	must(t, env.Client.Create(ctx, filePatch(t, ns, "fp", func(s *wbv1.FilePatchSpec) {
		s.Format = wbv1.PatchFormatStructured
		s.Operations = []wbv1.FileOperation{{Op: "replace", Path: "README.md", Content: ptr("hello, patched\n")}}
	})))
	patchPhase(t, ns, "fp", wbv1.FilePatchApplied)
	must(t, env.Client.Create(ctx, artifact(ns, "fp-patch", func(s *wbv1.ArtifactSpec) {
		s.Source, s.Root, s.Format = "export", ptr(wbv1.RootName("repo")), ptr(wbv1.ExportFormatGitPatch)
		s.FilePatchRef = ptr(wbv1.ObjectName("fp"))
	})))
	a, blob = storedArtifact(t, ns, "fp-patch")
	if a.Status.Files != 1 || !bytes.Contains(blob, []byte("+hello, patched")) || bytes.Contains(blob, []byte("NOTES.md")) {
		t.Fatalf("FilePatch export: files %d\n%s", a.Status.Files, blob)
	}
}

// TestArchiveExportRoundTrips: a tar+gzip export of a subtree gunzips to the tar of the same
// subtree, entry for entry, and the same tree exports the same digest twice.
func TestArchiveExportRoundTrips(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	files := map[string]string{"out/a.txt": "alpha\n", "out/deep/b.bin": "\x00\x01beta", "out/c.txt": ""}
	for rel, content := range files {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755))
		must(t, writeFile(filepath.Join(dir, rel), content))
	}
	for _, name := range []string{"gz", "gz2"} {
		must(t, env.Client.Create(ctx, artifact(ns, name, func(s *wbv1.ArtifactSpec) {
			s.Source, s.Root, s.Path = "export", ptr(wbv1.RootName("repo")), ptr(wbv1.RelativePath("out"))
			s.Format = ptr(wbv1.ExportFormatTarGzip)
		})))
	}
	a, blob := storedArtifact(t, ns, "gz")
	a2, _ := storedArtifact(t, ns, "gz2")
	if a.Status.Digest != a2.Status.Digest {
		t.Fatalf("the same tree exported as %s and %s", a.Status.Digest, a2.Status.Digest)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob))
	must(t, err)
	raw, err := io.ReadAll(zr)
	must(t, err)
	got := map[string]string{}
	for _, en := range tarEntries(t, raw) {
		if en.hdr.Typeflag == tar.TypeReg {
			got[en.hdr.Name] = string(en.data)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(files) {
		t.Fatalf("round trip: %v, want %v", got, files)
	}
}

// TestExportRefusals: a git-patch export of a root that is no repository is refused with
// export-base-unknown; format on a capture and filePatchRef on a tar export are refused by
// the API server with export-invalid.
func TestExportRefusals(t *testing.T) {
	ctx := context.Background()
	ns, _ := readyWorkEnvironment(t)
	must(t, env.Client.Create(ctx, artifact(ns, "norepo", func(s *wbv1.ArtifactSpec) {
		s.Source, s.Root, s.Format = "export", ptr(wbv1.RootName("repo")), ptr(wbv1.ExportFormatGitPatch)
	})))
	var a wbv1.Artifact
	eventually(t, 30*time.Second, "artifact norepo refused", func() (bool, string) {
		get(t, ns, "norepo", &a)
		return a.Status.Refusal != nil || a.Status.Digest != "", fmt.Sprintf("%+v", a.Status)
	})
	if a.Status.Refusal == nil || a.Status.Refusal.Code != string(actuation.CodeExportBaseUnknown) {
		t.Fatalf("status %+v, want refusal %s", a.Status, actuation.CodeExportBaseUnknown)
	}
	bad := []*wbv1.Artifact{
		artifact(ns, "cap-fmt", func(s *wbv1.ArtifactSpec) {
			s.Source, s.SessionRef, s.Format = "capture", ptr(wbv1.ObjectName("s")), ptr(wbv1.ExportFormatTarGzip)
		}),
		artifact(ns, "tar-fp", func(s *wbv1.ArtifactSpec) {
			s.Source, s.Root, s.FilePatchRef = "export", ptr(wbv1.RootName("repo")), ptr(wbv1.ObjectName("fp"))
		}),
	}
	for _, b := range bad {
		err := env.Client.Create(ctx, b)
		if err == nil || !strings.Contains(err.Error(), string(actuation.CodeExportInvalid)) {
			t.Errorf("%s: create error %v, want %s", b.Name, err, actuation.CodeExportInvalid)
		}
	}
}

// sourcedEnvironment creates environment e with root repo materialized from the git source
// (url, commit) and waits until it is Ready with status.roots reporting the root. It skips
// only when the node does not report status.roots: node materialization of sourced roots
// (issue 28 item 1) is not in this tree.
func sourcedEnvironment(t *testing.T, ns, url, commit string) *wbv1.Environment {
	t.Helper()
	ctx := context.Background()
	err := env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Git: &wbv1.GitRootSource{URL: url, Commit: ptr(commit)}}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
	}})
	must(t, err)
	var e wbv1.Environment
	deadline := time.Now().Add(60 * time.Second)
	for {
		get(t, ns, "e", &e)
		if len(e.Status.Roots) > 0 && (e.Status.Phase == wbv1.EnvironmentReady || e.Status.Phase == wbv1.EnvironmentFailed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sourced environment not Ready: %+v", e.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if e.Status.Phase != wbv1.EnvironmentReady || e.Status.Roots[0].Resolved != commit {
		t.Fatalf("sourced environment: %+v", e.Status)
	}
	return &e
}

// TestPatchExportOfGitSource: an Environment materialized from a git source served by a
// file:// remote; after an edit in the sandbox, the patch export is taken against the
// commit in status.roots[].resolved and reproduces the workspace on a fresh clone.
func TestPatchExportOfGitSource(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	src, commit := gitRepoWorkDir(t)
	sourcedEnvironment(t, ns, "file://"+src, commit)
	must(t, env.Client.Create(ctx, session(ns, "s", "e")))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/cp", nil, []string{"README.md", "NOTES.md"})))
	must(t, env.Client.Create(ctx, command(ns, "c", "/bin/cp", "README.md", "NOTES.md")))
	if c := waitFinal(t, ns, "c"); c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("command: %+v", c.Status)
	}
	must(t, env.Client.Create(ctx, artifact(ns, "patch", func(s *wbv1.ArtifactSpec) {
		s.Source, s.Root, s.Format = "export", ptr(wbv1.RootName("repo")), ptr(wbv1.ExportFormatGitPatch)
	})))
	a, blob := storedArtifact(t, ns, "patch")
	if a.Status.Base != commit || a.Status.Files != 1 {
		t.Fatalf("status base %q files %d, want %s and 1", a.Status.Base, a.Status.Files, commit)
	}
	fresh := applyToFreshClone(t, src, commit, blob)
	if got := readFile(t, filepath.Join(fresh, "NOTES.md")); got != "hello\n" {
		t.Fatalf("NOTES.md after apply: %q", got)
	}
}

// TestPoolClaimBySource (issue 28 item 3): a pool whose template root is a git source at a
// commit pre-materializes its members; a claim for the same source and commit (the URL
// spelled with an upper-case scheme) adopts a member, and a claim for another
// commit of the same source is refused with pool-template-mismatch.
func TestPoolClaimBySource(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	src, commit := gitRepoWorkDir(t)
	tmpl := wbv1.EnvironmentSpec{Backend: wbv1.BackendFixtureCopy,
		Roots:        []wbv1.EnvironmentRoot{{Name: "repo", Git: &wbv1.GitRootSource{URL: "file://" + src, Commit: ptr(commit)}}},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName}}
	err := env.Client.Create(ctx, &wbv1.EnvironmentPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: wbv1.EnvironmentPoolSpec{Template: tmpl, Replicas: ptr(int32(1))}})
	must(t, err)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ms := members(t, ns, "pool")
		ready, reported := 0, 0
		var last wbv1.EnvironmentStatus
		for _, m := range ms {
			last = m.Status
			if len(m.Status.Roots) > 0 {
				reported++
			}
			if m.Status.Phase == wbv1.EnvironmentReady && len(m.Status.Roots) > 0 {
				ready++
			}
		}
		if ready == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Ready sourced member: %+v", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	same := *tmpl.DeepCopy()
	same.Roots[0].Git.URL = "FILE://" + src
	must(t, env.Client.Create(ctx, claimer(ns, "same", "pool", same)))
	e := waitEnvReady(t, ns, "same")
	if e.Status.PoolMember == nil || e.Status.PoolMember.UID == string(e.UID) {
		t.Fatalf("a claim for the same source and commit did not adopt a member: %+v", e.Status)
	}
	other := *tmpl.DeepCopy()
	other.Roots[0].Git.Commit = ptr(strings.Repeat("0", 40))
	must(t, env.Client.Create(ctx, claimer(ns, "other", "pool", other)))
	eventually(t, 30*time.Second, "claim for another commit refused", func() (bool, string) {
		var o wbv1.Environment
		get(t, ns, "other", &o)
		for _, c := range o.Status.Conditions {
			if c.Type == wbv1.ConditionScheduled && strings.Contains(c.Message, string(actuation.CodePoolTemplateMismatch)) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", o.Status)
	})
}

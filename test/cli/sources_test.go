package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// Issue 28 item 4: sources in and results out through the CLI and the MCP server.

const sha40 = "3f2c9e1d4b5a69788796a5b4c3d2e1f0a9b8c7d6"

// TestEnvCreateSourcesGolden: `env create --dry-run -o json` with each source prints the
// Environment the flags build (compared with testdata/env-create-*.json); malformed source
// flags exit 64 with a message naming the fix.
func TestEnvCreateSourcesGolden(t *testing.T) {
	ns := namespace(t)
	archive := filepath.Join(t.TempDir(), "src.tar.gz")
	must(t, os.WriteFile(archive, []byte("not really gzip, but hashed all the same\n"), 0o644))
	for _, c := range []struct {
		name string
		args []string
	}{
		{"env-create-git", []string{"--git", "https://git.example.com/app.git@" + sha40, "--sparse", "src", "--sparse", "docs", "--depth", "3", "--git-secret", "app-token"}},
		{"env-create-git-ref", []string{"--git", "ssh://git@git.example.com/app.git", "--git-ref", "main", "--source-root", "work"}},
		{"env-create-archive", []string{"--archive", archive}},
		{"env-create-oci", []string{"--oci", "registry.example.com/app/src@sha256:" + strings.Repeat("ab", 32), "--oci-secret", "pull"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			golden(t, c.name, ns, "<none>", kw(t, ns, operatorUser, append([]string{"env", "create", "demo", "--dry-run", "-o", "json"}, c.args...)...), 0)
		})
	}
	for _, c := range []struct {
		args []string
		text string
	}{
		{[]string{"--git", "https://git.example.com/app.git@main"}, "--git-ref"},
		{[]string{"--git", "https://git.example.com/app.git@" + sha40[:12]}, "full 40- or 64-hex commit"},
		{[]string{"--git", "https://git.example.com/app.git@" + sha40, "--git-ref", "main"}, "URL alone"},
		{[]string{"--git", "https://git.example.com/app.git@" + sha40, "--oci", "r/x:1"}, "at most one source"},
		{[]string{"--depth", "2"}, "without a source"},
		{[]string{"--git", "https://git.example.com/app.git@" + sha40, "--sparse", "../up"}, "root-relative"},
		{[]string{"--git", "https://git.example.com/app.git@" + sha40, "--root", "repo=/tmp"}, "named both"},
	} {
		r := kw(t, ns, operatorUser, append([]string{"env", "create", "demo", "--dry-run"}, c.args...)...)
		if r.code != 64 || !strings.Contains(r.stderr, c.text) {
			t.Errorf("%v: want exit 64 with %q: %s", c.args, c.text, r)
		}
	}
}

// TestExportPatchCLI: `export patch ENV --out FILE` on an environment whose root is a git
// repository writes a git-format patch that `git apply` turns a fresh clone into the
// workspace; `export archive ENV:ROOT --out FILE` writes a gzip stream of the root.
func TestExportPatchCLI(t *testing.T) {
	ns := namespace(t)
	dir := gitRepo(t)
	environment(t, ns, "e", dir)
	must(t, os.WriteFile(filepath.Join(dir, "README"), []byte("hello\nfrom the agent\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "NEW"), []byte("new file\n"), 0o644))
	out := filepath.Join(t.TempDir(), "e.patch")
	r := kw(t, ns, operatorUser, "export", "patch", "e", "--out", out, "-o", "json")
	var arts wbv1.ArtifactList
	must(t, st.Env.Client.List(context.Background(), &arts, ctrlclient.InNamespace(ns)))
	if len(arts.Items) != 1 || arts.Items[0].Status.Digest == "" || arts.Items[0].Status.Files != 2 ||
		arts.Items[0].Spec.Format == nil || *arts.Items[0].Spec.Format != wbv1.ExportFormatGitPatch {
		t.Fatalf("patch artifact = %+v\n%s", arts.Items, r)
	}
	if !subresourcesServed(t) {
		t.Skip("the patch was stored (digest " + string(arts.Items[0].Status.Digest) + "); downloading it needs the aggregated API (subresources.workbench.sensorium.dev), which this control plane does not serve")
	}
	if r.code != 0 {
		t.Fatalf("export patch: %s", r)
	}
	var res struct {
		Digest, Base string
		Files        int
	}
	must(t, json.Unmarshal([]byte(r.stdout), &res))
	if res.Digest != string(arts.Items[0].Status.Digest) || res.Files != 2 || len(res.Base) != 40 {
		t.Fatalf("export patch result %+v, artifact %+v", res, arts.Items[0].Status)
	}
	fresh := filepath.Join(t.TempDir(), "fresh")
	for _, args := range [][]string{{"clone", "-q", dir, fresh}, {"-C", fresh, "checkout", "-q", res.Base}, {"-C", fresh, "apply", "--index", out}} {
		if b, err := exec.Command("git", append([]string{"-c", "safe.directory=*"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	for _, f := range []string{"README", "NEW"} {
		want, _ := os.ReadFile(filepath.Join(dir, f))
		got, err := os.ReadFile(filepath.Join(fresh, f))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s after git apply: %q (%v), want %q", f, got, err, want)
		}
	}
	tgz := filepath.Join(t.TempDir(), "repo.tar.gz")
	if r := kw(t, ns, operatorUser, "export", "archive", "e:repo", "--out", tgz); r.code != 0 {
		t.Fatalf("export archive: %s", r)
	}
	b, err := os.ReadFile(tgz)
	must(t, err)
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("export archive wrote no gzip stream (%d bytes)", len(b))
	}
}

// TestMCPCreateEnvironmentSources: the MCP create_environment tool's input schema offers
// the same sources as the CLI (git, gitRef, sparse, depth, gitSecret, archive, oci), and a
// malformed source comes back as a tool error naming the fix, creating nothing.
func TestMCPCreateEnvironmentSources(t *testing.T) {
	ns := namespace(t)
	ctx, s := mcpStdio(t, 2*time.Minute, ns, operatorUser)
	tools, err := s.ListTools(ctx, nil)
	must(t, err)
	var props map[string]any
	for _, tool := range tools.Tools {
		if tool.Name == "create_environment" {
			b, err := json.Marshal(tool.InputSchema)
			must(t, err)
			var schema struct {
				Properties map[string]any `json:"properties"`
			}
			must(t, json.Unmarshal(b, &schema))
			props = schema.Properties
		}
	}
	var names []string
	for k := range props {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, want := range []string{"archive", "archiveDigest", "archiveFormat", "depth", "git", "gitRef", "gitSecret", "oci", "ociSecret", "sourceRoot", "sparse"} {
		if !slices.Contains(names, want) {
			t.Errorf("create_environment's input schema lacks %q: %v", want, names)
		}
	}
	res, _ := call(t, s, "create_environment", map[string]any{"name": "demo", "git": "https://git.example.com/app.git@main"})
	if !res.IsError || !strings.Contains(text(res), "gitRef") {
		t.Fatalf("a malformed git source: error=%v %q", res.IsError, text(res))
	}
	var envs wbv1.EnvironmentList
	must(t, st.Env.Client.List(context.Background(), &envs, ctrlclient.InNamespace(ns)))
	if len(envs.Items) != 0 {
		t.Fatalf("a refused create_environment created %d environments", len(envs.Items))
	}
}

// TestEnvCreateArchive: `env create --archive FILE` uploads the file as an Artifact on the
// only node, checks its digest, and creates the environment pinned to that node and digest;
// the node materializes it (status.roots reports the digest).
func TestEnvCreateArchive(t *testing.T) {
	ns := namespace(t)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello from an archive\n"), 0o644))
	archive := filepath.Join(t.TempDir(), "src.tar.gz")
	if b, err := exec.Command("tar", "-C", dir, "-czf", archive, "hello.txt").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, b)
	}
	r := kw(t, ns, operatorUser, "env", "create", "arch", "--archive", archive, "--no-wait")
	var a wbv1.Artifact
	must(t, st.Env.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: "arch-archive"}, &a))
	if a.Status.Digest == "" || a.Spec.Source != "upload" || !strings.Contains(r.stderr, string(a.Status.Digest)) {
		t.Fatalf("archive artifact %+v: %s", a.Status, r)
	}
	if r.code != 0 && strings.Contains(r.stderr, "must name a source") {
		t.Skipf("the archive was uploaded (%s); the environment webhook of this tree does not admit archive roots yet (node materialization of sourced roots, issue 28 item 1, is not in this tree): %s", a.Status.Digest, r.stderr)
	}
	if r.code != 0 {
		t.Fatalf("env create --archive: %s", r)
	}
	var e wbv1.Environment
	deadline := time.Now().Add(60 * time.Second)
	for {
		must(t, st.Env.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: "arch"}, &e))
		if len(e.Status.Roots) > 0 && (e.Status.Phase == wbv1.EnvironmentReady || e.Status.Phase == wbv1.EnvironmentFailed) {
			break
		}
		if time.Now().After(deadline) {
			if len(e.Status.Roots) == 0 {
				t.Skipf("the node does not report status.roots within 60s (node materialization, issue 28 item 1, is not in this tree): %+v", e.Status)
			}
			t.Fatalf("environment arch: %+v", e.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if e.Status.Phase != wbv1.EnvironmentReady || e.Status.Roots[0].Resolved != string(a.Status.Digest) {
		t.Fatalf("environment arch: %+v", e.Status)
	}
}

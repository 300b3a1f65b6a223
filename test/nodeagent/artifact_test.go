package nodeagent

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

func artifact(ns, name string, mut func(*wbv1.ArtifactSpec)) *wbv1.Artifact {
	a := &wbv1.Artifact{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{wbv1.NodeLabel: nodeName}},
		Spec: wbv1.ArtifactSpec{EnvironmentRef: "e"}}
	mut(&a.Spec)
	return a
}

// storedArtifact waits for the artifact's digest and returns it with the blob the node
// holds for it.
func storedArtifact(t *testing.T, ns, name string) (*wbv1.Artifact, []byte) {
	t.Helper()
	var a wbv1.Artifact
	eventually(t, 30*time.Second, "artifact "+name+" stored", func() (bool, string) {
		get(t, ns, name, &a)
		return a.Status.Digest != "" || a.Status.Refusal != nil, fmt.Sprintf("%+v", a.Status)
	})
	if a.Status.Refusal != nil {
		t.Fatalf("artifact refused: %+v", a.Status)
	}
	hexd := strings.TrimPrefix(string(a.Status.Digest), "sha256:")
	blob, err := os.ReadFile(filepath.Join(stateDir, "artifacts", "sha256", hexd[:2], hexd))
	must(t, err)
	sum := sha256.Sum256(blob)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != string(a.Status.Digest) || int64(len(blob)) != a.Status.Size {
		t.Fatalf("stored blob hashes to %s (%d bytes); status says %s (%d bytes)", got, len(blob), a.Status.Digest, a.Status.Size)
	}
	if a.Status.NodeName != nodeName || a.Status.RetainedUntil == nil ||
		!a.Status.RetainedUntil.Time.Equal(a.CreationTimestamp.Add(time.Duration(a.Spec.RetentionSeconds)*time.Second)) {
		t.Fatalf("status = %+v (retention %ds)", a.Status, a.Spec.RetentionSeconds)
	}
	return &a, blob
}

// TestExportArtifact: an export of a subtree of a host-local root is a deterministic tar
// held in the node's content-addressed store; its digest is the sha256 of the stored blob.
func TestExportArtifact(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	must(t, os.MkdirAll(filepath.Join(dir, "out", "deep"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "out", "report.txt"), []byte("report\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "out", "deep", "data.bin"), []byte{0, 1, 2}, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("not exported\n"), 0o600))
	entries := exportedOut(ctx, t, ns, "x")
	if got := entryNames(entries); got != "out/deep/,out/deep/data.bin,out/report.txt" {
		t.Fatalf("tar entries = %s", got)
	}
}

// TestCaptureArtifact: a capture holds the output the session's ring retains.
func TestCaptureArtifact(t *testing.T) {
	ctx := context.Background()
	ns := commandInFreshEnvironment(t, "/bin/echo", []string{"captured"}, "captured")
	if c := waitFinal(t, ns, "c"); c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("command: %+v", c.Status)
	}
	must(t, env.Client.Create(ctx, artifact(ns, "cap", func(s *wbv1.ArtifactSpec) {
		s.Source, s.SessionRef = "capture", ptr(wbv1.ObjectName("s"))
	})))
	_, blob := storedArtifact(t, ns, "cap")
	if string(blob) != "captured\n" {
		t.Fatalf("captured %q", blob)
	}
}

// tarEntry is one entry of a tar stream: its header and its content.
type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

// exportedOut creates export Artifact ns/name of directory out of root repo in environment
// e and returns the entries of the tar the node stored.
func exportedOut(ctx context.Context, t *testing.T, ns, name string) []tarEntry {
	t.Helper()
	must(t, env.Client.Create(ctx, artifact(ns, name, func(s *wbv1.ArtifactSpec) {
		s.Source, s.Root, s.Path = "export", ptr(wbv1.RootName("repo")), ptr(wbv1.RelativePath("out"))
	})))
	_, blob := storedArtifact(t, ns, name)
	return tarEntries(t, blob)
}

// entryNames joins the names of entries with commas, in their order.
func entryNames(entries []tarEntry) string {
	names := make([]string, 0, len(entries))
	for _, en := range entries {
		names = append(names, en.hdr.Name)
	}
	return strings.Join(names, ",")
}

// tarEntries reads every entry of the tar stream blob.
func tarEntries(t *testing.T, blob []byte) []tarEntry {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(blob))
	var out []tarEntry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		must(t, err)
		data, err := io.ReadAll(tr)
		must(t, err)
		out = append(out, tarEntry{hdr: h, data: data})
	}
}

package sources_test

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/sources"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// layer builds a tar layer of files (name -> content).
func layer(t *testing.T, files map[string]string, extra ...*tar.Header) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for n, c := range files {
		_ = tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte(c))
	}
	for _, h := range extra {
		_ = tw.WriteHeader(h)
	}
	_ = tw.Close()
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (r ioReadCloser, err error) { return nopCloser{bytes.NewReader(data)}, nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// PushArtifact pushes an image of layers to reg/repo:tag and returns its digest.
func pushArtifact(t *testing.T, reg, repo, tag string, layers ...v1.Layer) string {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(reg + "/" + repo + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d.String()
}

func ociDst(t *testing.T) (*fsaccess.Root, string) {
	d := newDst(t)
	r, err := fsaccess.OpenRoot(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, d
}

func TestOCIByDigestAndTag(t *testing.T) {
	reg := sourcetest.ServeRegistry(t)
	digest := pushArtifact(t, reg, "team/ws", "v1", layer(t, map[string]string{"a.txt": "one\n", "dir/b.txt": "two\n"}), layer(t, map[string]string{"c.txt": "three\n"}))
	pol := sources.Policy{AllowedHosts: []string{reg}}
	ctx := context.Background()

	root, dir := ociDst(t)
	res, err := sources.OCI{}.MaterializeOCI(ctx, reg+"/team/ws@"+digest, authn.Anonymous, pol, root, sources.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resolved != digest || res.Entries != 4 || res.Bytes != int64(len("one\ntwo\nthree\n")) {
		t.Fatalf("result %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "dir/b.txt")); string(b) != "two\n" {
		t.Fatalf("dir/b.txt %q", b)
	}

	root, _ = ociDst(t)
	if _, err := (sources.OCI{}).MaterializeOCI(ctx, reg+"/team/ws:v1", nil, pol, root, sources.Limits{}); string(actuation.CodeOf(err)) != string(actuation.CodeSourceRefNotAllowed) {
		t.Fatalf("tag without policy: %v", err)
	}
	pol.AllowRefs = true
	root, _ = ociDst(t)
	res, err = sources.OCI{}.MaterializeOCI(ctx, reg+"/team/ws:v1", nil, pol, root, sources.Limits{})
	if err != nil || res.Resolved != digest {
		t.Fatalf("by tag: %+v %v", res, err)
	}

	root, _ = ociDst(t)
	missing := "sha256:" + string(bytes.Repeat([]byte("0"), 64))
	if _, err := (sources.OCI{}).MaterializeOCI(ctx, reg+"/team/ws@"+missing, nil, pol, root, sources.Limits{}); string(actuation.CodeOf(err)) != string(actuation.CodeSourceCommitNotFound) {
		t.Fatalf("missing digest: %v", err)
	}
	root, _ = ociDst(t)
	if _, err := (sources.OCI{}).MaterializeOCI(ctx, reg+"/team/ws@"+digest, nil, sources.Policy{AllowedHosts: []string{"registry.example.org"}}, root, sources.Limits{}); string(actuation.CodeOf(err)) != string(actuation.CodeSourceHostNotAllowed) {
		t.Fatalf("host outside the allowlist: %v", err)
	}
}

func TestOCILayerAttacks(t *testing.T) {
	reg := sourcetest.ServeRegistry(t)
	pol := sources.Policy{AllowedHosts: []string{reg}}
	for _, c := range []struct {
		name   string
		layers []v1.Layer
		code   string
	}{
		{"traversal", []v1.Layer{layer(t, map[string]string{"../evil": "x"})}, string(actuation.CodeArchivePathTraversal)},
		{"symlink out", []v1.Layer{layer(t, nil, &tar.Header{Name: "l", Linkname: "/etc", Typeflag: tar.TypeSymlink})}, string(actuation.CodeArchiveLinkEscape)},
		{"device", []v1.Layer{layer(t, nil, &tar.Header{Name: "null", Typeflag: tar.TypeChar, Mode: 0o666})}, string(actuation.CodeArchiveSpecialFile)},
		{"whiteout", []v1.Layer{layer(t, map[string]string{"a": "1"}), layer(t, map[string]string{".wh.a": ""})}, string(actuation.CodeArchiveSpecialFile)},
		{"same file in two layers", []v1.Layer{layer(t, map[string]string{"a": "1"}), layer(t, map[string]string{"a": "2"})}, string(actuation.CodeArchiveDuplicateEntry)},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := pushArtifact(t, reg, "attack/x", "latest", c.layers...)
			root, _ := ociDst(t)
			_, err := sources.OCI{}.MaterializeOCI(context.Background(), reg+"/attack/x@"+d, nil, pol, root, sources.Limits{})
			if string(actuation.CodeOf(err)) != c.code {
				t.Fatalf("got %v, want %s", err, c.code)
			}
		})
	}
}

func TestDockerConfigAuth(t *testing.T) {
	a, err := sources.DockerConfigAuth([]byte(`{"auths":{"https://reg.example.org/v1/":{"username":"u","password":"p"}}}`), "reg.example.org")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := a.Authorization()
	if cfg.Username != "u" || cfg.Password != "p" {
		t.Fatalf("%+v", cfg)
	}
	if _, err := sources.DockerConfigAuth([]byte(`not json`), "x"); string(actuation.CodeOf(err)) != string(actuation.CodeSourceCredentialsInvalid) {
		t.Fatal(err)
	}
}

package sourcetest

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"sensorium.dev/workbench/internal/test/testkit"
)

// OCILayer is a tar layer holding files (name -> content, regular files) and then the
// extra headers as they are (links, directories, hostile entries).
func OCILayer(t testing.TB, files map[string]string, extra ...*tar.Header) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for n, c := range files {
		testkit.Must(t, tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(c))
		testkit.Must(t, err)
	}
	for _, h := range extra {
		testkit.Must(t, tw.WriteHeader(h))
	}
	testkit.Must(t, tw.Close())
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	testkit.Must(t, err)
	return l
}

// PushOCI pushes an image of layers to reg/repoTag (a registry ServeRegistry serves) and
// returns its digest.
func PushOCI(t testing.TB, reg, repoTag string, layers ...v1.Layer) string {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	testkit.Must(t, err)
	ref, err := name.ParseReference(reg + "/" + repoTag)
	testkit.Must(t, err)
	testkit.Must(t, remote.Write(ref, img))
	d, err := img.Digest()
	testkit.Must(t, err)
	return d.String()
}

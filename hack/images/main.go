// Command images builds the Sensorium Workbench container images without Docker: it
// compiles each shipped binary (static, CGO_ENABLED=0, -trimpath) and packs it into an
// image with go-containerregistry, written as an image tarball (the `docker save` layout
// that `ctr images import`, `kind load image-archive` and `docker load` all read).
//
// The images are reproducible: every file and the image config carry one fixed timestamp
// (SOURCE_DATE_EPOCH, else the commit time of HEAD, else the Unix epoch), so the same
// sources and Go toolchain give the same digests. They have the layout of the Dockerfile's
// stages: /manager as user 65532, /node-agent and /workbench-sandbox as root (the agent
// needs it), /workbench-apiserver as user 65532 when that command exists, and /pause (the
// pod sandbox image for clusters that reach no registry) as user 65535.
//
//	go run ./hack/images -out bin/images -tag latest
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// spec is one image: the file it is written to (<image>.tar), its reference name (the
// one the manifests in config/ use), the commands it holds (built from ./<pkg>, installed
// as /<base name>; the first is the entrypoint) and its user.
type spec struct {
	image       string
	ref         string
	pkgs        []string
	user        string
	description string
	// usrLinks adds /bin, /sbin, /lib and /lib64 as links into /usr, for an image that
	// mounts the node's /usr (the node agent runs the node's own tools).
	usrLinks bool
}

var specs = []spec{
	{image: "manager", ref: "controller", pkgs: []string{"./cmd/manager"}, user: "65532:65532",
		description: "Sensorium Workbench manager: cluster controllers and admission webhooks"},
	{image: "node-agent", ref: "node-agent", pkgs: []string{"./cmd/node-agent", "./cmd/workbench-sandbox"}, user: "0:0", usrLinks: true,
		description: "Sensorium Workbench node agent (DaemonSet) with its sandbox helper"},
	{image: "workbench-apiserver", ref: "workbench-apiserver", pkgs: []string{"./cmd/workbench-apiserver"}, user: "65532:65532",
		description: "Sensorium Workbench aggregated API server"},
	{image: "pause", ref: "workbench-pause", pkgs: []string{"./hack/images/pause"}, user: "65535:65535",
		description: "Pod sandbox (pause) container for clusters without registry access"},
}

func main() {
	out := flag.String("out", "bin/images", "directory the image tarballs are written to")
	tag := flag.String("tag", "latest", "tag of every image (references controller, node-agent, workbench-apiserver, workbench-pause)")
	only := flag.String("only", "", "comma-separated image names to build (default: all whose commands exist)")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH of the binaries and images")
	flag.Parse()
	if err := run(context.Background(), *out, *tag, *only, *arch); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, tag, only, arch string) error {
	created, err := sourceDate(ctx)
	if err != nil {
		return err
	}
	revision := gitOutput(ctx, "rev-parse", "HEAD")
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", out, err)
	}
	work, err := os.MkdirTemp("", "workbench-images-")
	if err != nil {
		return fmt.Errorf("creating a build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }() // a temporary build directory

	for _, s := range specs {
		if len(want) > 0 && !want[s.image] {
			continue
		}
		if !allExist(s.pkgs) {
			if want[s.image] {
				return fmt.Errorf("image %s: a command of %v does not exist in this tree", s.image, s.pkgs)
			}
			fmt.Fprintf(os.Stderr, "images: %s skipped: %v not in this tree\n", s.image, s.pkgs)
			continue
		}
		files := map[string]string{} // path in the image -> built file
		for _, pkg := range s.pkgs {
			bin := filepath.Join(work, s.image, filepath.Base(pkg))
			if err := goBuild(ctx, pkg, bin, arch); err != nil {
				return fmt.Errorf("image %s: %w", s.image, err)
			}
			files[filepath.Base(pkg)] = bin
		}
		img, err := buildImage(s, files, tag, revision, created, arch)
		if err != nil {
			return fmt.Errorf("image %s: %w", s.image, err)
		}
		ref, err := name.NewTag(s.ref + ":" + tag)
		if err != nil {
			return fmt.Errorf("image %s: reference: %w", s.image, err)
		}
		path := filepath.Join(out, s.image+".tar")
		if err := tarball.WriteToFile(path+".tmp", ref, img); err != nil {
			return fmt.Errorf("image %s: writing %s: %w", s.image, path, err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return fmt.Errorf("image %s: %w", s.image, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return fmt.Errorf("image %s: digest: %w", s.image, err)
		}
		fmt.Printf("%s\t%s:%s\t%s\n", path, s.ref, tag, digest)
	}
	return nil
}

// buildImage packs files (name -> host path) into /<name> of a one-layer image.
func buildImage(s spec, files map[string]string, tag, revision string, created time.Time, arch string) (v1.Image, error) {
	layerTar, err := layerTar(files, s.usrLinks, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "hack/images: " + strings.Join(s.pkgs, " "),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("appending the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = arch
	cf.OS = "linux"
	cf.Created = v1.Time{Time: created}
	labels := map[string]string{
		"org.opencontainers.image.title":       s.ref,
		"org.opencontainers.image.description": s.description,
		"org.opencontainers.image.version":     tag,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
		"org.opencontainers.image.vendor":      "Sensorium",
	}
	if revision != "" {
		labels["org.opencontainers.image.revision"] = revision
	}
	cf.Config = v1.Config{
		Entrypoint: []string{"/" + filepath.Base(s.pkgs[0])},
		User:       s.user,
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels:     labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the config: %w", err)
	}
	return img, nil
}

// layerTar is the one layer: /etc/passwd and /etc/group naming the users of the images,
// /tmp, and the binaries, all with the same timestamp and root ownership.
func layerTar(files map[string]string, usrLinks bool, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(name string, mode int64, typ byte, size int64) *tar.Header {
		return &tar.Header{Name: name, Mode: mode, Typeflag: typ, Size: size, ModTime: mtime,
			Uid: 0, Gid: 0, Uname: "", Gname: "", Format: tar.FormatPAX}
	}
	write := func(h *tar.Header, body []byte) error {
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("tar header %s: %w", h.Name, err)
		}
		if _, err := tw.Write(body); err != nil {
			return fmt.Errorf("tar body %s: %w", h.Name, err)
		}
		return nil
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\npause:x:65535:65535:pause:/:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:65532:\npause:x:65535:\n"
	entries := []struct {
		h    *tar.Header
		body []byte
	}{
		{hdr("etc/", 0o755, tar.TypeDir, 0), nil},
		{hdr("etc/group", 0o644, tar.TypeReg, int64(len(group))), []byte(group)},
		{hdr("etc/passwd", 0o644, tar.TypeReg, int64(len(passwd))), []byte(passwd)},
		{hdr("home/", 0o755, tar.TypeDir, 0), nil},
		{hdr("home/nonroot/", 0o700, tar.TypeDir, 0), nil},
		{hdr("tmp/", 0o1777, tar.TypeDir, 0), nil},
	}
	entries[4].h.Uid, entries[4].h.Gid = 65532, 65532
	for _, e := range entries {
		if err := write(e.h, e.body); err != nil {
			return nil, err
		}
	}
	if usrLinks {
		for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
			h := hdr(l, 0o777, tar.TypeSymlink, 0)
			h.Linkname = "usr/" + l
			if err := write(h, nil); err != nil {
				return nil, err
			}
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		body, err := os.ReadFile(files[n])
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", files[n], err)
		}
		if err := write(hdr(n, 0o755, tar.TypeReg, int64(len(body))), body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing the layer tar: %w", err)
	}
	return buf.Bytes(), nil
}

func goBuild(ctx context.Context, pkg, out, arch string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
}

func allExist(pkgs []string) bool {
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(p, "main.go")); err != nil {
			return false
		}
	}
	return true
}

// sourceDate is SOURCE_DATE_EPOCH, else the commit time of HEAD, else the Unix epoch.
func sourceDate(ctx context.Context) (time.Time, error) {
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", v, err)
		}
		return time.Unix(sec, 0).UTC(), nil
	}
	if v := gitOutput(ctx, "log", "-1", "--format=%ct"); v != "" {
		if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Unix(sec, 0).UTC(), nil
		}
	}
	return time.Unix(0, 0).UTC(), nil
}

func gitOutput(ctx context.Context, args ...string) string {
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

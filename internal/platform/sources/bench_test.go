package sources_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/sources"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// benchTree is the benchmarks' source: 2,000 files of 4 KiB in 40 directories (8 MiB).
func benchTree() map[string]string {
	files := map[string]string{}
	body := string(bytes.Repeat([]byte("workbench source benchmark line\n"), 128))
	for d := 0; d < 40; d++ {
		for f := 0; f < 50; f++ {
			files[fmt.Sprintf("dir%02d/file%03d.txt", d, f)] = fmt.Sprintf("%d/%d\n", d, f) + body
		}
	}
	return files
}

// benchDst makes an empty 0700 destination directory for one iteration (the caller
// stops the timer around it).
func benchDst(b *testing.B) string {
	b.Helper()
	dst := filepath.Join(b.TempDir(), "copy")
	if err := os.Mkdir(dst, 0o700); err != nil {
		b.Fatal(err)
	}
	return dst
}

// BenchmarkGitMaterialize is MaterializeGit of one commit over file:// (scrubbed env,
// fetch by commit at depth 1, checkout, tree verification, .git finalized, walk).
// BenchmarkGitCloneFloor is the same-run floor: a plain `git clone --depth 1` of the same
// repository (file://) plus `git checkout` of the commit.
func BenchmarkGitMaterialize(b *testing.B) {
	parent := b.TempDir()
	dir, ids := sourcetest.Repo(b, parent, "bench", benchTree())
	g := sources.Git{Scratch: filepath.Join(b.TempDir(), "scratch")}
	pol := sources.Policy{AllowedFileDirs: []string{parent}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dst := benchDst(b)
		b.StartTimer()
		if _, err := g.MaterializeGit(context.Background(), sources.GitSource{URL: "file://" + dir, Commit: ids[0]}, pol, dst, sources.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGitCloneFloor(b *testing.B) {
	parent := b.TempDir()
	dir, ids := sourcetest.Repo(b, parent, "bench", benchTree())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dst := filepath.Join(b.TempDir(), "copy")
		b.StartTimer()
		for _, args := range [][]string{{"clone", "-q", "--no-checkout", "--depth=1", "file://" + dir, dst}, {"-C", dst, "checkout", "-q", "--detach", ids[0]}} {
			cmd := exec.Command("git", args...)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + parent, "GIT_CONFIG_NOSYSTEM=1"}
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("git %v: %v %s", args, err, out)
			}
		}
	}
}

func benchTarGz(b *testing.B) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for n, c := range benchTree() {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			b.Fatal(err)
		}
		_, _ = tw.Write([]byte(c))
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

// BenchmarkArchiveExtract is Extract of a tar.gz of the tree under the archive rules;
// BenchmarkTarXFloor is `tar -xzf` of the same file, same run.
func BenchmarkArchiveExtract(b *testing.B) {
	data := benchTarGz(b)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dst := benchDst(b)
		root, err := fsaccess.OpenRoot(dst)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := sources.Extract(bytes.NewReader(data), int64(len(data)), sources.FormatTarGzip, root, sources.Limits{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_ = root.Close()
		b.StartTimer()
	}
}

func BenchmarkTarXFloor(b *testing.B) {
	data := benchTarGz(b)
	f := filepath.Join(b.TempDir(), "a.tar.gz")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dst := benchDst(b)
		b.StartTimer()
		if out, err := exec.Command("tar", "-xzf", f, "-C", dst).CombinedOutput(); err != nil {
			b.Fatalf("tar: %v %s", err, out)
		}
	}
}

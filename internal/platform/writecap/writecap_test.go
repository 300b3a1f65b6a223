package writecap

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/procexec"
)

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper()
	os.Exit(m.Run())
}

// target is where the sandbox sees the write root.
const target = "/workspace/out"

// runIn runs a shell script in a sandbox with the area at target and the
// per-file limit, then collects.
func runIn(t *testing.T, p Policy, script string) (*Area, Result, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("writecap mounts tmpfs areas and starts sandboxes: run as root (as CI does)")
	}
	a, err := Prepare(t.TempDir(), p)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if _, err := os.Stat(a.Dir()); !os.IsNotExist(err) {
			t.Errorf("area directory left behind: %v", err)
		}
	})
	res, err := procexec.NewRunner(procexec.Limits{}).Run(context.Background(), procexec.Spec{
		Argv:          []string{"/bin/sh", "-c", script},
		Env:           []string{"PATH=/usr/bin:/bin"},
		Dir:           "",
		Timeout:       30 * time.Second,
		Mounts:        []procexec.Mount{a.Mount(target)},
		FileSizeLimit: a.FileSizeLimit(),
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	out := string(res.Output)
	got, err := a.Collect()
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	t.Logf("exit %d output %q result %+v", res.ExitCode, out, got)
	return a, got, out
}

func TestWithinCapsCommits(t *testing.T) {
	p := Policy{MaxBytesTotal: 64 << 10, MaxBytesPerFile: 16 << 10}
	a, res, out := runIn(t, p, "cd "+target+" && mkdir -p sub && printf hello > sub/a.txt && head -c 16384 /dev/zero > b.bin && echo done")
	if !strings.Contains(out, "done") || res.Code != "" {
		t.Fatalf("run within caps: %q %+v", out, res)
	}
	if len(res.Files) != 2 || res.Files[0].Path != "b.bin" || res.Files[0].Size != 16<<10 ||
		res.Files[1].Path != "sub/a.txt" || res.Files[1].SHA256 != fsaccess.DigestBytes([]byte("hello")) || res.BytesTotal != 16<<10+5 {
		t.Fatalf("collected %+v", res)
	}
	dest := t.TempDir()
	if err := os.WriteFile(filepath.Join(dest, "b.bin"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(res, dest); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "sub/a.txt")); err != nil || string(b) != "hello" {
		t.Errorf("committed sub/a.txt: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "b.bin")); err != nil || !bytes.Equal(b, make([]byte, 16<<10)) {
		t.Errorf("committed b.bin: %d bytes %v", len(b), err)
	}
}

func TestPerFileCapStopsTheWrite(t *testing.T) {
	p := Policy{MaxBytesTotal: 1 << 20, MaxBytesPerFile: 100000}
	a, res, out := runIn(t, p, "head -c 300000 /dev/zero > "+target+"/big; echo rc=$?")
	if !strings.Contains(out, "File too large") || !strings.Contains(out, "rc=1") {
		t.Errorf("the write past the per-file cap did not fail with EFBIG: %q", out)
	}
	if res.Code != string(actuation.CodeWriteFileCapReached) || res.Path != "big" {
		t.Fatalf("result %+v, want %s on big", res, string(actuation.CodeWriteFileCapReached))
	}
	// Stopped mid-write: the file holds one byte past the cap, never the 300000.
	if len(res.Files) != 1 || res.Files[0].Size != p.MaxBytesPerFile+1 {
		t.Errorf("files %+v", res.Files)
	}
	dest := t.TempDir()
	if err := a.Commit(res, dest); actuation.CodeOf(err) != actuation.CodeWriteFileCapReached {
		t.Errorf("Commit: %v, want refusal %s", err, string(actuation.CodeWriteFileCapReached))
	}
	if ents, _ := os.ReadDir(dest); len(ents) != 0 {
		t.Errorf("something was committed: %v", ents)
	}
}

func TestExactPerFileCapIsNotReached(t *testing.T) {
	p := Policy{MaxBytesTotal: 1 << 20, MaxBytesPerFile: 100000}
	_, res, out := runIn(t, p, "head -c 100000 /dev/zero > "+target+"/exact; echo rc=$?")
	if !strings.Contains(out, "rc=0") || res.Code != "" || len(res.Files) != 1 || res.Files[0].Size != 100000 {
		t.Errorf("a file of exactly the cap: %q %+v", out, res)
	}
}

func TestTotalCapStopsTheWrite(t *testing.T) {
	p := Policy{MaxBytesTotal: 256 << 10, MaxBytesPerFile: 200 << 10}
	a, res, out := runIn(t, p, "cd "+target+" && head -c 204800 /dev/zero > one; echo rc1=$?; head -c 204800 /dev/zero > two; echo rc2=$?")
	if !strings.Contains(out, "rc1=0") || !strings.Contains(out, "No space left on device") || !strings.Contains(out, "rc2=1") {
		t.Errorf("the write past the total cap did not fail with ENOSPC: %q", out)
	}
	if res.Code != string(actuation.CodeWriteTotalCapReached) {
		t.Fatalf("result %+v, want %s", res, string(actuation.CodeWriteTotalCapReached))
	}
	if res.BytesTotal > p.MaxBytesTotal+4096 {
		t.Errorf("%d bytes written past a %d-byte cap", res.BytesTotal, p.MaxBytesTotal)
	}
	if err := a.Commit(res, t.TempDir()); actuation.CodeOf(err) != actuation.CodeWriteTotalCapReached {
		t.Errorf("Commit: %v", err)
	}
}

func TestFileCountCap(t *testing.T) {
	p := Policy{MaxBytesTotal: 1 << 20, MaxBytesPerFile: 1024, MaxFiles: 3}
	_, res, out := runIn(t, p, "cd "+target+" && for i in 1 2 3 4 5 6; do : > f$i || echo fail$i; done")
	if !strings.Contains(out, "No space left on device") {
		t.Errorf("creating more files than the cap did not fail: %q", out)
	}
	if res.Code != string(actuation.CodeWriteFileCountCapReached) {
		t.Fatalf("result %+v, want %s", res, string(actuation.CodeWriteFileCountCapReached))
	}
}

func TestPathPattern(t *testing.T) {
	p := Policy{MaxBytesTotal: 1 << 20, MaxBytesPerFile: 1024, PathPattern: `reports/[a-z]+\.txt`}
	a, res, _ := runIn(t, p, "cd "+target+" && mkdir reports && echo ok > reports/good.txt && echo no > reports/bad.bin")
	if res.Code != string(actuation.CodeWritePathForbidden) || res.Path != "reports/bad.bin" {
		t.Fatalf("result %+v, want %s on reports/bad.bin", res, string(actuation.CodeWritePathForbidden))
	}
	if err := a.Commit(res, t.TempDir()); actuation.CodeOf(err) != actuation.CodeWritePathForbidden {
		t.Errorf("Commit: %v", err)
	}
	_, res, _ = runIn(t, p, "cd "+target+" && mkdir reports && echo ok > reports/good.txt")
	if res.Code != "" || len(res.Files) != 1 {
		t.Errorf("matching path refused: %+v", res)
	}
}

func TestSymlinkRefused(t *testing.T) {
	p := Policy{MaxBytesTotal: 1 << 20, MaxBytesPerFile: 1024}
	_, res, _ := runIn(t, p, "ln -s /etc/passwd "+target+"/link")
	if res.Code != string(actuation.CodeWriteKindForbidden) || res.Path != "link" {
		t.Fatalf("result %+v, want %s", res, string(actuation.CodeWriteKindForbidden))
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		p    Policy
		ok   bool
	}{
		{"valid", Policy{MaxBytesTotal: 10, MaxBytesPerFile: 10}, true},
		{"zero total", Policy{MaxBytesPerFile: 10}, false},
		{"total above max", Policy{MaxBytesTotal: MaxBytesTotal + 1, MaxBytesPerFile: 10}, false},
		{"per-file above total", Policy{MaxBytesTotal: 10, MaxBytesPerFile: 11}, false},
		{"zero per-file", Policy{MaxBytesTotal: 10}, false},
		{"negative files", Policy{MaxBytesTotal: 10, MaxBytesPerFile: 1, MaxFiles: -1}, false},
		{"too many files", Policy{MaxBytesTotal: 10, MaxBytesPerFile: 1, MaxFiles: MaxFiles + 1}, false},
		{"bad pattern", Policy{MaxBytesTotal: 10, MaxBytesPerFile: 1, PathPattern: "("}, false},
		{"good pattern", Policy{MaxBytesTotal: 10, MaxBytesPerFile: 1, PathPattern: "[a-z]+/.*"}, true},
	}
	for _, c := range cases {
		err := Validate(c.p)
		if (err == nil) != c.ok || (err != nil && actuation.CodeOf(err) != actuation.CodeInvalidSpec) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

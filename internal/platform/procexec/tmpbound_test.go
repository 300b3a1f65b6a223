package procexec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPrivateTmpFloodBounded: a sandbox writing to /tmp past its bound gets ENOSPC (the
// kernel's tmpfs size), the host temp base receives none of it, and the sandbox's other
// writes keep working after the flood.
func TestPrivateTmpFloodBounded(t *testing.T) {
	requireSandbox(t)
	base := t.TempDir()
	r := NewRunner(Limits{TempBase: base, TempBytes: 8 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var hostBytes int64
	// While it runs, the host temp dir gets nothing (it is not mounted).
	res, hostTmp := runWithTemp(ctx, t, r, Spec{Argv: []string{"/bin/sh", "-c",
		`head -c 33554432 /dev/zero > /tmp/flood; echo "rc=$?"; ls -l /tmp/flood | awk '{print "size=" $5}'; rm /tmp/flood; echo ok > /tmp/after && cat /tmp/after`}})
	_ = filepath.Walk(base, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			hostBytes += fi.Size()
		}
		return nil
	})
	out := string(res.Output)
	if !strings.Contains(out, "No space left on device") || !strings.Contains(out, "rc=1") {
		t.Fatalf("a 32 MiB write to an 8 MiB /tmp: %q, want ENOSPC", out)
	}
	if !strings.Contains(out, "size=8388608") && !strings.Contains(out, "size=83") {
		t.Fatalf("flood size: %q", out)
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "ok") {
		t.Fatalf("after the flood: %q", out)
	}
	if hostBytes != 0 {
		t.Fatalf("the host temp base %s holds %d bytes", hostTmp, hostBytes)
	}
}

// TestFileSizeLimitGivesEFBIG: one write past RLIMIT_FSIZE fails with EFBIG (SIGXFSZ is
// ignored, so the program lives on to see it) on a writable root.
func TestFileSizeLimitGivesEFBIG(t *testing.T) {
	requireSandbox(t)
	dir := t.TempDir()
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", `head -c 3000000 /dev/zero > big; echo "rc=$?"; stat -c size=%s big`},
		Dir: dir, WritableRoots: []string{dir}, FileSizeLimit: 1 << 20})
	out := string(res.Output)
	if !strings.Contains(out, "File too large") || !strings.Contains(out, "size=1048576") || res.Signal != "" {
		t.Fatalf("a 3 MB write under a 1 MiB RLIMIT_FSIZE: %q (signal %q), want EFBIG at 1 MiB", out, res.Signal)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "big"), &st); err != nil || st.Size != 1<<20 {
		t.Fatalf("host sees %d bytes: %v", st.Size, err)
	}
}

func TestTmpMountBounds(t *testing.T) {
	if m, err := tmpMount(0); err != nil || !strings.Contains(m.Data, "size=268435456") {
		t.Fatalf("default: %+v %v", m, err)
	}
	for _, n := range []int64{-1, 1000, MaxTempBytes + 1} {
		if _, err := tmpMount(n); err == nil {
			t.Fatalf("tmpMount(%d) accepted", n)
		}
	}
}

package procexec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExtraMounts: a host file appears read-only at another path, a host
// directory writable at another path, and RLIMIT_FSIZE makes a long write fail
// with EFBIG (not SIGXFSZ).
func TestExtraMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandbox mounts need root (as CI runs)")
	}
	src := t.TempDir()
	script := filepath.Join(src, "script.sh")
	if err := os.WriteFile(script, []byte("echo pinned script\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := NewRunner(Limits{}).Run(context.Background(), Spec{
		Argv: []string{"/bin/sh", "-c", "/bin/sh /opt/scripts/run.sh; echo x >> /opt/scripts/run.sh || echo ro-ok; " +
			"head -c 5000 /dev/zero > /srv/out/f; echo rc=$?; wc -c < /srv/out/f"},
		Env:           []string{"PATH=/usr/bin:/bin"},
		Timeout:       30 * time.Second,
		Mounts:        []Mount{{Source: script, Target: "/opt/scripts/run.sh"}, {Source: out, Target: "/srv/out", Writable: true}},
		FileSizeLimit: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	o := string(res.Output)
	for _, want := range []string{"pinned script", "ro-ok", "File too large", "rc=1", "1000"} {
		if !strings.Contains(o, want) {
			t.Errorf("output %q lacks %q", o, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(out, "f")); err != nil || fi.Size() != 1000 {
		t.Errorf("host side of the writable mount: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(script); string(b) != "echo pinned script\n" {
		t.Errorf("read-only mount was written: %q", b)
	}
}

func TestValidateMounts(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := [][]Mount{
		{{Source: "rel", Target: "/x"}},
		{{Source: dir, Target: "x"}},
		{{Source: dir, Target: "/"}},
		{{Source: dir, Target: "/tmp"}},
		{{Source: dir, Target: "/usr/local"}},
		{{Source: dir, Target: "/x/../y"}},
		{{Source: filepath.Join(dir, "missing"), Target: "/x"}},
		{{Source: file, Target: "/x", Writable: true}},
		make([]Mount, MaxMounts+1),
	}
	for i, ms := range bad {
		if err := ValidateMounts(ms); err == nil {
			t.Errorf("case %d accepted: %+v", i, ms)
		}
	}
	if err := ValidateMounts([]Mount{{Source: dir, Target: "/srv/x", Writable: true}, {Source: file, Target: "/opt/f"}}); err != nil {
		t.Errorf("valid mounts refused: %v", err)
	}
}

// TestSeparateStderr: with StderrBytes, stdout and stderr are captured apart, each
// under its own cap.
func TestSeparateStderr(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandbox needs root (as CI runs)")
	}
	res, err := NewRunner(Limits{}).Run(context.Background(), Spec{
		Argv:        []string{"/bin/sh", "-c", "echo out; echo err >&2; head -c 5000 /dev/zero >&2"},
		Env:         []string{"PATH=/usr/bin:/bin"},
		OutputBytes: 100,
		StderrBytes: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != "out\n" || res.Truncated {
		t.Errorf("stdout %q truncated %v", res.Output, res.Truncated)
	}
	if string(res.Stderr) != "err\n\x00\x00\x00\x00\x00\x00" || res.StderrBytesSeen != 5004 || !res.StderrTruncated {
		t.Errorf("stderr %q seen %d truncated %v", res.Stderr, res.StderrBytesSeen, res.StderrTruncated)
	}
}

package actionruns

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/actionexec"
	"sensorium.dev/workbench/internal/platform/writecap"
)

// A run's working directory (and C3 write root) resolves only to an existing directory
// beneath one of the environment's roots, reached with no symlink on the way: an unknown
// root, a climb out of the root, a symlink (to inside or outside the root) and a file are
// refused with working-directory-forbidden.
func TestResolveDirStaysBeneathTheRoot(t *testing.T) {
	base, outside := t.TempDir(), t.TempDir()
	for _, d := range []string{"src/pkg", "real/sub"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(base, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(base, "in")); err != nil {
		t.Fatal(err)
	}
	roots := []backends.MountedRoot{{Name: "work", Path: base}, {Name: "guest", GuestDir: "g"}}

	for _, tc := range []struct {
		at   actuation.CwdAddress
		want string // "" refused
	}{
		{actuation.CwdAddress{Root: "work"}, base},
		{actuation.CwdAddress{Root: "work", Path: "src/pkg"}, filepath.Join(base, "src/pkg")},
		{actuation.CwdAddress{Root: "other"}, ""},
		{actuation.CwdAddress{Root: "guest"}, ""}, // no host path: not a host directory
		{actuation.CwdAddress{Root: "work", Path: "../" + filepath.Base(outside)}, ""},
		{actuation.CwdAddress{Root: "work", Path: "src/../../x"}, ""},
		{actuation.CwdAddress{Root: "work", Path: "out"}, ""},
		{actuation.CwdAddress{Root: "work", Path: "in"}, ""},
		{actuation.CwdAddress{Root: "work", Path: "in/sub"}, ""}, // a symlink on the way, inside the root
		{actuation.CwdAddress{Root: "work", Path: "file"}, ""},
		{actuation.CwdAddress{Root: "work", Path: "missing"}, ""},
		{actuation.CwdAddress{Root: "work", Path: "/etc"}, ""},
	} {
		dir, code, msg := resolveDir(roots, tc.at)
		switch {
		case tc.want != "" && (code != "" || dir != tc.want):
			t.Errorf("resolveDir(%+v) = %q %s %s; want %q", tc.at, dir, code, msg, tc.want)
		case tc.want == "" && code != actuation.CodeWorkingDirectoryForbidden:
			t.Errorf("resolveDir(%+v) = %q %q; want %s", tc.at, dir, code, actuation.CodeWorkingDirectoryForbidden)
		}
	}
}

// Artifact names stay within the API's 253 characters and distinct per index, also for
// the longest run names.
func TestArtifactNameBounded(t *testing.T) {
	if got := artifactName("run", 3); got != "run-a3" {
		t.Fatalf("artifactName(run, 3) = %q", got)
	}
	long := strings.Repeat("r", 253)
	seen := map[string]bool{}
	for i := range maxArtifactRefs {
		n := artifactName(long, i)
		if len(n) > 253 || seen[n] || !strings.HasSuffix(n, fmt.Sprintf("-a%d", i)) {
			t.Fatalf("artifactName(253 chars, %d) = %q (%d chars, seen %v)", i, n, len(n), seen[n])
		}
		seen[n] = true
	}
}

// The envelope's capture reaches the outcome bounded: touched files past the status cap
// are cut and flagged, and a cap the envelope reached fails a run that exited 0.
func TestApplyCaptureBoundsAndFails(t *testing.T) {
	var files []writecap.File
	for i := range maxTouchedFiles + 10 {
		files = append(files, writecap.File{Path: fmt.Sprintf("f%d", i), Size: 1, SHA256: "sha256:00"})
	}
	o := &actionOutcome{Phase: wbv1.ActionRunSucceeded, Message: "exited 0"}
	applyCapture(o, actionexec.Capture{Writes: &writecap.Result{Files: files}, Code: "write-cap-reached", Message: "too many files"})
	if len(o.TouchedFiles) != maxTouchedFiles || !o.TouchedTruncated {
		t.Fatalf("%d touched files, truncated %v; want %d, truncated", len(o.TouchedFiles), o.TouchedTruncated, maxTouchedFiles)
	}
	if o.Phase != wbv1.ActionRunFailed || o.RefusalCode != "write-cap-reached" {
		t.Fatalf("a run whose envelope reached a cap ended %s %q; want Failed write-cap-reached", o.Phase, o.RefusalCode)
	}

	// A run that already failed with its own code keeps it.
	o = &actionOutcome{Phase: wbv1.ActionRunTimedOut, RefusalCode: string(actuation.CodeActionTimeout)}
	applyCapture(o, actionexec.Capture{Code: "write-cap-reached"})
	if o.Phase != wbv1.ActionRunTimedOut || o.RefusalCode != string(actuation.CodeActionTimeout) {
		t.Fatalf("a timed-out run became %s %q", o.Phase, o.RefusalCode)
	}
}

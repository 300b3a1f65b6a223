package patch

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// hygieneVectors are the shared golden vectors of the workspace-hygiene rule; the patch
// engine must reach the same verdict as the actuation core on each.
type hygieneVectors struct {
	Vectors []struct {
		Name  string `json:"name"`
		Input struct {
			Path             string `json:"path"`
			Existed          bool   `json:"existed"`
			OldMode          uint32 `json:"oldMode"`
			NewMode          uint32 `json:"newMode"`
			AllowGitMetadata bool   `json:"allowGitMetadata"`
			AllowExecutable  bool   `json:"allowExecutable"`
		} `json:"input"`
		Expect struct {
			OK   *bool  `json:"ok"`
			Code string `json:"code"`
		} `json:"expect"`
	} `json:"vectors"`
}

// TestHygieneVectorsThroughEngine applies each golden vector as a real patch (a
// structured create or replace, or a unified create carrying the mode) and checks the
// engine's verdict and that a refused patch wrote nothing.
func TestHygieneVectorsThroughEngine(t *testing.T) {
	raw, err := os.ReadFile("../../../test/vectors/patch-hygiene.json")
	must(t, err)
	var vf hygieneVectors
	dec := json.NewDecoder(bytes.NewReader(raw))
	must(t, dec.Decode(&vf))
	if len(vf.Vectors) < 20 {
		t.Fatalf("%d vectors, want at least 20", len(vf.Vectors))
	}
	for _, v := range vf.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			in := v.Input
			if in.Existed && in.NewMode != in.OldMode {
				t.Skip("a mode change on an existing file is refused earlier as patch-mode-unsupported; the core's verdict is covered in internal/actuation")
			}
			dir := t.TempDir()
			if in.Existed {
				must(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, in.Path)), 0o755))
				must(t, os.WriteFile(filepath.Join(dir, in.Path), []byte("old\n"), os.FileMode(in.OldMode)))
				must(t, os.Chmod(filepath.Join(dir, in.Path), os.FileMode(in.OldMode)))
			}
			r, err := fsaccess.OpenRoot(dir)
			must(t, err)
			defer func() { _ = r.Close() }()
			pol := Policy{AllowCreate: true, AllowGitMetadata: in.AllowGitMetadata, AllowExecutable: in.AllowExecutable}
			var rq Request
			switch {
			case in.Existed:
				rq = req(FormatStructured, structured(t, StructuredOp{Op: OpReplace, Path: in.Path, Content: "new\n"}), pol)
			case in.NewMode == 0o644:
				rq = req(FormatStructured, structured(t, StructuredOp{Op: OpCreate, Path: in.Path, Content: "new\n"}), pol)
			default:
				mode := "100755"
				if in.NewMode&0o111 == 0 {
					mode = "100644"
				}
				rq = req(FormatUnified, "diff --git a/"+in.Path+" b/"+in.Path+"\nnew file mode "+mode+"\n--- /dev/null\n+++ b/"+in.Path+"\n@@ -0,0 +1 @@\n+new\n", pol)
			}
			_, err = Apply(r, rq)
			if v.Expect.OK != nil && *v.Expect.OK {
				must(t, err)
				if got := read(t, dir, in.Path); got != "new\n" {
					t.Fatalf("content %q", got)
				}
				return
			}
			wantCode(t, err, v.Expect.Code)
			if b, _ := os.ReadFile(filepath.Join(dir, in.Path)); in.Existed && string(b) != "old\n" || !in.Existed && b != nil {
				t.Fatalf("a refused patch changed %s: %q", in.Path, b)
			}
		})
	}
}

// TestPatchNeverFollowsSymlinks: a directory inside the root that is a symlink — even one
// staying beneath the root, such as a link planted by a build to .git/hooks — is never
// written through, and the hook is not created.
func TestPatchNeverFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, ".git", "hooks"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "src"), 0o755))
	must(t, os.Symlink(".git/hooks", filepath.Join(dir, "tools")))
	write(t, dir, "src/a.txt", "a\n")
	must(t, os.Symlink("a.txt", filepath.Join(dir, "src", "alias")))
	r, err := fsaccess.OpenRoot(dir)
	must(t, err)
	defer func() { _ = r.Close() }()
	pol := Policy{AllowCreate: true}
	_, err = Apply(r, req(FormatStructured, structured(t, StructuredOp{Op: OpCreate, Path: "tools/pre-commit", Content: "#!/bin/sh\nid\n"}), pol))
	wantCode(t, err, string(actuation.CodePatchOutsideRoot))
	if _, err := os.Lstat(filepath.Join(dir, ".git", "hooks", "pre-commit")); !os.IsNotExist(err) {
		t.Fatalf("a hook was written through the symlinked directory: %v", err)
	}
	_, err = Apply(r, req(FormatStructured, structured(t, StructuredOp{Op: OpReplace, Path: "src/alias", Content: "b\n"}), pol))
	wantCode(t, err, string(actuation.CodePatchTargetNotRegular))
	// The same patch through a real directory applies.
	_, err = Apply(r, req(FormatStructured, structured(t, StructuredOp{Op: OpReplace, Path: "src/a.txt", Content: "b\n"}), pol))
	must(t, err)
	if got := read(t, dir, "src/a.txt"); got != "b\n" {
		t.Fatalf("src/a.txt = %q", got)
	}
}

// TestPatchRaceDirSwappedForSymlink: the directory a patch was planned against is swapped
// for a symlink to .git/hooks just before the write; the write is refused and rolled back.
func TestPatchRaceDirSwappedForSymlink(t *testing.T) {
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, ".git", "hooks"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "tools"), 0o755))
	write(t, dir, "tools/x.txt", "x\n")
	r, err := fsaccess.OpenRoot(dir)
	must(t, err)
	defer func() { _ = r.Close() }()
	beforeWrite = func(i int, _ string) error {
		if i == 0 {
			must(t, os.Rename(filepath.Join(dir, "tools"), filepath.Join(dir, "tools.old")))
			must(t, os.Symlink(".git/hooks", filepath.Join(dir, "tools")))
		}
		return nil
	}
	defer func() { beforeWrite = nil }()
	_, err = Apply(r, req(FormatStructured, structured(t, StructuredOp{Op: OpCreate, Path: "tools/pre-commit", Content: "#!/bin/sh\nid\n"}), Policy{AllowCreate: true}))
	if err == nil {
		t.Fatal("the write followed a symlink swapped in after planning")
	}
	if _, err := os.Lstat(filepath.Join(dir, ".git", "hooks", "pre-commit")); !os.IsNotExist(err) {
		t.Fatalf("a hook was written through the swapped symlink: %v", err)
	}
}

package hostexec

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// TestHostCommand: the host executor checks an admitted command against real directories
// and builds its sandbox spec — working directory beneath its root, only the profile's
// allowed roots mounted (read-only ones read-only), argv and the curated environment as
// admitted — and refuses a cwd that escapes through a symlink, is not a directory or is in
// a root the profile does not allow, and a program that resolves to a launcher, each with
// its code and before anything starts.
func TestHostCommand(t *testing.T) {
	base := t.TempDir()
	repo, docs, secret, outside := filepath.Join(base, "repo"), filepath.Join(base, "docs"), filepath.Join(base, "secret"), filepath.Join(base, "outside")
	for _, d := range []string{repo, docs, secret, outside, filepath.Join(repo, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(repo, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	roots := []backends.MountedRoot{{Name: "repo", Path: repo}, {Name: "docs", Path: docs, ReadOnly: true}, {Name: "secret", Path: secret}}
	prof := actuation.Profile{Executable: "/bin/echo", AllowedRoots: []string{"repo", "docs"}, GitMetadata: "Writable"}
	in := actuation.CommandIntent{Argv: []string{"/bin/echo", "hi"}, TimeoutSeconds: 7, OutputBytes: 4096}
	in.Cwd.Root, in.Cwd.Path = "repo", "sub"
	req := backends.CommandRequest{Profile: prof, Roots: roots, Intent: in, Env: []actuation.EnvVar{{Name: "LANG", Value: "C"}}}

	e := Open("env-1")
	if e.Placement != backends.PlaceHost || e.Guest != nil || e.Exec == nil {
		t.Fatalf("Open = %+v, want a host Env", e)
	}
	if ref := e.Exec.ActionClasses(); ref != nil {
		t.Fatalf("the host sandbox refuses action classes: %v", ref)
	}
	c, ref := e.Exec.Command(req)
	if ref != nil {
		t.Fatal(ref)
	}
	s := c.Sandbox
	if c.Remote != nil || s == nil {
		t.Fatalf("command = %+v, want a sandbox spec", c)
	}
	if s.Dir != filepath.Join(repo, "sub") || !slices.Equal(s.Argv, in.Argv) || !slices.Equal(s.Env, []string{"LANG=C"}) ||
		!slices.Equal(s.WritableRoots, []string{repo}) || !slices.Equal(s.ReadableRoots, []string{docs}) ||
		s.Timeout != 7*time.Second || s.OutputBytes != 4096 || s.Network != procexec.NetworkNone || !s.GitMetadataWritable {
		t.Fatalf("spec = %+v", s)
	}

	for _, tc := range []struct {
		name string
		mod  func(r *backends.CommandRequest)
		code actuation.Code
	}{
		{"symlink escape", func(r *backends.CommandRequest) { r.Intent.Cwd.Path = "escape" }, ""},
		{"not a directory", func(r *backends.CommandRequest) { r.Intent.Cwd.Path = "file" }, actuation.CodeCwdNotAllowed},
		{"root not allowed by the profile", func(r *backends.CommandRequest) { r.Intent.Cwd.Root, r.Intent.Cwd.Path = "secret", "" }, actuation.CodeRootNotAllowed},
		{"root of another environment", func(r *backends.CommandRequest) { r.Intent.Cwd.Root, r.Intent.Cwd.Path = "other", "" }, actuation.CodeRootNotAllowed},
		{"resolves to a launcher", func(r *backends.CommandRequest) {
			link := filepath.Join(base, "echo")
			if err := os.Symlink("/bin/sh", link); err != nil {
				t.Fatal(err)
			}
			r.Profile.Executable, r.Intent.Argv = link, []string{link, "hi"}
		}, actuation.CodeShellString},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req
			r.Profile.AllowedRoots = slices.Clone(req.Profile.AllowedRoots)
			tc.mod(&r)
			c, ref := e.Exec.Command(r)
			if ref == nil || c.Sandbox != nil {
				t.Fatalf("Command = %+v, want a refusal", c)
			}
			if tc.code != "" && ref.Code != tc.code {
				t.Fatalf("refusal %s, want %s", ref.Code, tc.code)
			}
			if ref.Code == "" {
				t.Fatalf("refusal without a code: %v", ref)
			}
		})
	}
}

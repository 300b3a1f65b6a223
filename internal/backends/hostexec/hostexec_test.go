package hostexec

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fsaccess"
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
	if _, ok := e.Exec.(Executor); !ok || e.Roots == nil || e.ID != "env-1" {
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

// TestHostTerminal: a host PTY program runs beneath the first allowed root with only the
// profile's allowed roots mounted (read-only ones read-only), and a program that resolves
// to a launcher or a profile allowing no root of the environment is refused with its code.
func TestHostTerminal(t *testing.T) {
	base := t.TempDir()
	repo, docs, secret := filepath.Join(base, "repo"), filepath.Join(base, "docs"), filepath.Join(base, "secret")
	roots := []backends.MountedRoot{{Name: "repo", Path: repo}, {Name: "docs", Path: docs, ReadOnly: true}, {Name: "secret", Path: secret}}
	prof := actuation.Profile{Executable: "/bin/cat", AllowedRoots: []string{"repo", "docs"}}
	req := backends.TerminalRequest{Profile: prof, Roots: roots, SessionID: "s-1", Argv: []string{"/bin/cat"}, Env: []string{"TERM=xterm"}, Relay: "/agent"}
	term, ref := Open("env-1").Exec.Terminal(req)
	if ref != nil {
		t.Fatal(ref)
	}
	if term.Dir != repo || term.HostRelay || !slices.Equal(term.Argv, req.Argv) || !slices.Equal(term.Env, req.Env) ||
		!slices.Equal(term.WritableRoots, []string{repo}) || !slices.Equal(term.ReadableRoots, []string{docs}) {
		t.Fatalf("terminal = %+v", term)
	}
	none := req
	none.Profile.AllowedRoots = []string{"other"}
	if _, ref := Open("env-1").Exec.Terminal(none); ref == nil || ref.Code != actuation.CodeRootNotAllowed {
		t.Fatalf("terminal with no allowed root: %v", ref)
	}
	link := filepath.Join(base, "cat")
	if err := os.Symlink("/usr/bin/env", link); err != nil {
		t.Fatal(err)
	}
	launcher := req
	launcher.Profile.Executable, launcher.Argv = link, []string{link}
	if _, ref := Open("env-1").Exec.Terminal(launcher); ref == nil {
		t.Fatal("a terminal program that resolves to a launcher was not refused")
	}
}

// TestHostRoots: a host root's file access is the node's pinned directory (read, watch
// and git-patch root alike); a root without a host directory is refused.
func TestHostRoots(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := fsaccess.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	mr := backends.MountedRoot{Name: "repo", Path: dir}
	f, err := Open("env-1").Roots.OpenRoot(mr, func() (*fsaccess.Root, error) { return r, nil })
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Read(context.Background(), "a.txt", 0, 100)
	if err != nil || string(res.Data) != "hi\n" {
		t.Fatalf("read = %+v, %v", res, err)
	}
	if w, err := f.Watch(); err != nil || w != r {
		t.Fatalf("Watch = %v, %v; want the pinned root", w, err)
	}
	if g, err := f.GitPatchRoot(); err != nil || g != r || f.Origin() != "" {
		t.Fatalf("GitPatchRoot = %v, %v; origin %q", g, err, f.Origin())
	}
	changed := actuation.Refusef(actuation.CodeRootChanged, "not pinned")
	if _, err := Open("env-1").Roots.OpenRoot(mr, func() (*fsaccess.Root, error) { return nil, changed }); actuation.CodeOf(err) != actuation.CodeRootChanged {
		t.Fatalf("unpinned root: %v", err)
	}
	if _, err := Open("env-1").Roots.OpenRoot(backends.MountedRoot{Name: "vm", GuestDir: "vm"}, nil); actuation.CodeOf(err) != actuation.CodeCapabilityMismatch {
		t.Fatalf("root without a host directory: %v", err)
	}
}

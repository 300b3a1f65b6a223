// Package hostexec is the host implementation of the backends.Executor port: an
// environment whose commands run in the node's sandbox (internal/platform/procexec
// through the workbench-sandbox helper) and whose roots are host directories
// (host-local, fixture-copy.v1). It checks an admitted command against the host's rules —
// the symlink-resolved program classified again, the working directory resolved beneath
// its root without symlink escapes, only the profile's allowed roots mounted — and
// translates it into the sandbox's process spec.
package hostexec

import (
	"path/filepath"
	"slices"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// Open returns the host Env of environment id: the node's sandbox runs its processes and
// its roots are host directories (MountedRoot.Path).
func Open(id string) backends.Env {
	return backends.Env{ID: id, Exec: Executor{}, Roots: Roots{}}
}

// Executor runs an environment's commands in the node's sandbox.
type Executor struct{}

var _ backends.Executor = Executor{}

// ActionClasses: the host sandbox enforces the action classes' envelope.
func (Executor) ActionClasses() *actuation.Refusal { return nil }

// Command checks an admitted command against the host's rules and builds its sandboxed
// process spec (Command.Sandbox).
func (Executor) Command(req backends.CommandRequest) (backends.Command, *actuation.Refusal) {
	in := req.Intent
	// The program the node starts is the symlink-resolved one: classify it again.
	if ref := actuation.CheckResolvedExecutable(req.Profile, procexec.ResolveExecutable(in.Argv[0]), in.Argv); ref != nil {
		return backends.Command{}, ref
	}
	spec, ref := commandSpec(req.Roots, req.Profile.AllowedRoots, in, req.Env)
	if ref != nil {
		return backends.Command{}, ref
	}
	spec.GitMetadataWritable = req.Profile.GitMetadataWritable()
	return backends.Command{Sandbox: &spec}, nil
}

// commandSpec resolves the working directory beneath its root (openat2, so no symlink
// escapes) and builds the sandboxed process spec. Only the profile's allowedRoots are
// mounted in the sandbox (writable when the environment's root is); the environment's
// other roots are not visible to the command at all.
func commandSpec(roots []backends.MountedRoot, allowed []string, in actuation.CommandIntent, envVars []actuation.EnvVar) (procexec.Spec, *actuation.Refusal) {
	var rootPath string
	var writable, readable []string
	for _, r := range roots {
		if !slices.Contains(allowed, r.Name) {
			continue
		}
		if r.Name == in.Cwd.Root {
			rootPath = r.Path
		}
		if r.ReadOnly {
			readable = append(readable, r.Path)
		} else {
			writable = append(writable, r.Path)
		}
	}
	if rootPath == "" {
		return procexec.Spec{}, &actuation.Refusal{Code: actuation.CodeRootNotAllowed, Message: "root " + in.Cwd.Root + " is not a root of the environment"}
	}
	dir := rootPath
	if in.Cwd.Path != "" {
		root, err := fsaccess.OpenRoot(rootPath)
		if err != nil {
			return procexec.Spec{}, &actuation.Refusal{Code: actuation.CodeRootInvalid, Message: err.Error()}
		}
		fi, err := root.Lstat(in.Cwd.Path)
		_ = root.Close()
		if err != nil {
			code := actuation.CodeOf(err)
			if code == "" {
				code = actuation.CodeCwdNotAllowed
			}
			return procexec.Spec{}, &actuation.Refusal{Code: code, Message: err.Error()}
		}
		if fi.Type != fsaccess.TypeDir {
			return procexec.Spec{}, &actuation.Refusal{Code: actuation.CodeCwdNotAllowed, Message: "cwd " + in.Cwd.Path + " is not a directory"}
		}
		dir = filepath.Join(rootPath, in.Cwd.Path)
	}
	env := make([]string, 0, len(envVars))
	for _, e := range envVars {
		env = append(env, e.Name+"="+e.Value)
	}
	return procexec.Spec{
		Argv: in.Argv, Env: env, Dir: dir, Timeout: time.Duration(in.TimeoutSeconds) * time.Second,
		OutputBytes: in.OutputBytes, Network: procexec.NetworkNone, WritableRoots: writable, ReadableRoots: readable,
		TempDirEnv: "TMPDIR",
	}, nil
}

// Terminal checks an admitted PTY program against the host's rules (the symlink-resolved
// program classified again) and gives it the profile's allowed roots: its working
// directory is the first allowed root, and only the allowed roots are mounted (ro/rw).
func (Executor) Terminal(req backends.TerminalRequest) (backends.Terminal, *actuation.Refusal) {
	t := backends.Terminal{Argv: req.Argv, Env: req.Env}
	allowed := req.Profile.AllowedRoots
	for _, r := range req.Roots {
		if len(allowed) > 0 && r.Name == allowed[0] {
			t.Dir = r.Path
		}
		if r.Path != "" && slices.Contains(allowed, r.Name) {
			if r.ReadOnly {
				t.ReadableRoots = append(t.ReadableRoots, r.Path)
			} else {
				t.WritableRoots = append(t.WritableRoots, r.Path)
			}
		}
	}
	if t.Dir == "" {
		return backends.Terminal{}, actuation.Refusef(actuation.CodeRootNotAllowed, "no root of the environment is allowed by the profile")
	}
	if len(req.Argv) == 0 {
		return backends.Terminal{}, actuation.Refusef(actuation.CodeInvalidSpec, "a terminal needs a program")
	}
	if ref := actuation.CheckResolvedExecutable(req.Profile, procexec.ResolveExecutable(req.Argv[0]), req.Argv); ref != nil {
		return backends.Terminal{}, ref
	}
	t.Dir = filepath.Clean(t.Dir)
	return t, nil
}

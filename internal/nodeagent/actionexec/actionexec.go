// Package actionexec builds and finishes the node-side envelope of one action run
// (seed 002, classes C1..C7) on top of the process sandbox (internal/platform/procexec).
//
// Every class runs in the same sandbox as a structured command (own user, PID, mount,
// UTS, IPC, cgroup and network namespaces; no capabilities; no_new_privs; Landlock;
// seccomp; an empty environment but the declared one; stdin closed; no terminal) with:
//
//   - read (every class): the environment's roots read-only, a private scratch /tmp
//     removed after the run, the working directory a root path or the scratch dir;
//   - C2 (a script; also any pinned executable): the script's real path must lie beneath
//     a declared script root (symlinks resolved: an escape is refused), its content is
//     read once, checked against the declared sha256 before anything is spawned, and that
//     very content is what runs (a read-only copy attached at the declared path), so an
//     edit after the check changes nothing;
//   - scoped-fs-write (C3): a kernel-capped write area at the write root (writecap);
//   - egress-network (C4): the egress proxy inside the sandbox's network namespace
//     (egress);
//   - artifact-produce (C5): a kernel-capped artifact directory at ArtifactDir, promoted
//     to the node's blob store after the run (artifactout);
//   - C6: exactly the union of its declared effects; C7: the read envelope (its consent
//     is decided before dispatch).
//
// A missing primitive refuses the run (fail closed); nothing runs with a weaker envelope.
// No Kubernetes types are used here: the node agent converts its objects.
package actionexec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/artifactout"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/platform/egress"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/platform/writecap"
)

// Effects (seed 002 composed effects).
const (
	EffectRead            = "read"
	EffectScopedFSWrite   = "scoped-fs-write"
	EffectEgressNetwork   = "egress-network"
	EffectArtifactProduce = "artifact-produce"
)

// Sandbox-side names the node provides.
const (
	// ArtifactDir is where a C5 program writes its artifacts.
	ArtifactDir = "/artifacts"
	// ArtifactDirEnv names ArtifactDir in the program's environment.
	ArtifactDirEnv = "WORKBENCH_ARTIFACT_DIR"
	// TempDirEnv names the private scratch dir (/tmp).
	TempDirEnv = "TMPDIR"
	// MaxPinnedBytes caps a pinned script or executable (read once, hashed, copied).
	MaxPinnedBytes = 64 << 20
)

// Executable is what the declaration names.
type Executable struct {
	Kind        string // binary | script
	Path        string
	Interpreter string
	SHA256      string // 64 lowercase hex, optional
}

// Envelope is one run, resolved by the node agent: host paths, rendered argv.
type Envelope struct {
	Class      string   // C1..C7, for messages
	Effects    []string // read, scoped-fs-write, egress-network, artifact-produce
	Executable Executable
	// ScriptRoots are the C2 roots a script must resolve beneath.
	ScriptRoots []string
	// Argv is the rendered template; Argv[0] is replaced by the absolute program path.
	Argv []string
	// Env is the declaration's environment ("K=V"), nothing inherited.
	Env []string
	// Dir is the host working directory (beneath a root); "" selects the scratch dir.
	Dir string
	// ReadableRoots are the environment's root directories (host paths), all read-only.
	ReadableRoots []string
	// WriteRoot is the host directory of a scoped-fs-write effect and Write its caps.
	WriteRoot string
	Write     *writecap.Policy
	Egress    *egress.Policy
	Artifact  *artifactout.Policy
	Timeout   time.Duration
	// StdoutBytes and StderrBytes cap the captured output.
	StdoutBytes, StderrBytes int64
	Resources                cgroups.Limits
	CgroupID                 string
}

// Options are the node's settings.
type Options struct {
	// WorkBase is a private directory of the agent where per-run areas and pinned
	// copies live (never visible to programs but through their mounts).
	WorkBase string
	// Store receives promoted artifacts.
	Store artifactout.Store
	// Dial, when set, dials egress endpoints from the host (tests map names).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Run is a prepared envelope.
type Run struct {
	env    Envelope
	spec   procexec.Spec
	dir    string // per-run work dir (pins)
	write  *writecap.Area
	art    *artifactout.Area
	proxy  *egress.Proxy
	store  artifactout.Store
	digest string
}

// Capture is what the envelope observed.
type Capture struct {
	// ExecutableDigest is sha256:<hex> of the pinned script or executable, if pinned.
	ExecutableDigest string
	Writes           *writecap.Result
	Transcript       *egress.Transcript
	Artifacts        *artifactout.Result
	// Code and Message: the first cap reached or rule broken by the envelope (a write
	// or artifact cap: nothing committed or promoted), empty when none.
	Code    string
	Message string
}

func refuse(code actuation.Code, format string, args ...any) error {
	return actuation.Refusef(actuation.Code(string(code)), format, args...)
}

// Prepare checks the envelope and sets up every primitive it needs. On error nothing is
// left behind; the error carries a refusal code.
func Prepare(env Envelope, o Options) (_ *Run, err error) {
	if len(env.Argv) == 0 {
		return nil, refuse(actuation.CodeArgvTemplateInvalid, "empty argv")
	}
	for _, e := range env.Effects {
		switch e {
		case EffectRead, EffectScopedFSWrite, EffectEgressNetwork, EffectArtifactProduce:
		default:
			return nil, refuse(actuation.CodeActionClassUnavailable, "class %s: effect %q is not enforced by this node", env.Class, e)
		}
	}
	has := func(e string) bool { return slices.Contains(env.Effects, e) }
	// A block without its effect, or an effect without its block, never runs.
	switch {
	case has(EffectScopedFSWrite) != (env.Write != nil && env.WriteRoot != ""),
		has(EffectEgressNetwork) != (env.Egress != nil),
		has(EffectArtifactProduce) != (env.Artifact != nil):
		return nil, refuse(actuation.CodeActionClassParamsInvalid, "class %s: effects %v do not match the declared blocks", env.Class, env.Effects)
	}
	if o.WorkBase == "" {
		return nil, errors.New("actionexec: no work base")
	}
	if err := os.MkdirAll(o.WorkBase, 0o700); err != nil {
		return nil, fmt.Errorf("actionexec: create %s: %w", o.WorkBase, err)
	}
	dir, err := os.MkdirTemp(o.WorkBase, "run-")
	if err != nil {
		return nil, fmt.Errorf("actionexec: per-run dir: %w", err)
	}
	r := &Run{env: env, dir: dir, store: o.Store}
	defer func() {
		if err != nil {
			r.Abort()
		}
	}()
	spec := procexec.Spec{
		Env: append([]string(nil), env.Env...), Dir: env.Dir, Timeout: env.Timeout,
		OutputBytes: env.StdoutBytes, StderrBytes: env.StderrBytes, Network: procexec.NetworkNone,
		ReadableRoots: env.ReadableRoots, TempDirEnv: TempDirEnv, Resources: env.Resources, CgroupID: env.CgroupID,
	}
	if spec.StderrBytes <= 0 {
		spec.StderrBytes = 1 // stderr kept apart from stdout even when the declaration keeps none
	}
	for _, kv := range spec.Env {
		k, _, _ := strings.Cut(kv, "=")
		if k == TempDirEnv || k == ArtifactDirEnv || strings.HasSuffix(strings.ToUpper(k), "_PROXY") {
			return nil, refuse(actuation.CodeEnvKeyForbidden, "environment variable %s is provided by the node", k)
		}
	}
	process, pins, err := r.executable()
	if err != nil {
		return nil, err
	}
	spec.Argv = append([]string{process}, env.Argv[1:]...)
	spec.Mounts = pins
	var fsize int64
	if has(EffectScopedFSWrite) {
		if !filepath.IsAbs(env.WriteRoot) || !dirUnder(env.WriteRoot, env.ReadableRoots) {
			return nil, refuse(actuation.CodeWorkingDirectoryForbidden, "write root %s is not beneath a root of the environment", env.WriteRoot)
		}
		if r.write, err = writecap.Prepare(dir, *env.Write); err != nil {
			return nil, err
		}
		spec.Mounts = append(spec.Mounts, r.write.Mount(env.WriteRoot))
		fsize = max(fsize, r.write.FileSizeLimit())
	}
	if has(EffectArtifactProduce) {
		if o.Store == nil {
			return nil, refuse(actuation.CodeActionClassUnavailable, "class %s: no artifact store on this node", env.Class)
		}
		if r.art, err = artifactout.Prepare(dir, *env.Artifact); err != nil {
			return nil, err
		}
		spec.Mounts = append(spec.Mounts, r.art.Mount(ArtifactDir))
		spec.Env = append(spec.Env, ArtifactDirEnv+"="+ArtifactDir)
		fsize = max(fsize, r.art.FileSizeLimit())
	}
	// One RLIMIT_FSIZE per process: with both areas (C6) the larger per-file cap stops
	// writes in the kernel, the smaller is checked when the area is collected.
	spec.FileSizeLimit = fsize
	if has(EffectEgressNetwork) {
		if r.proxy, err = egress.New(*env.Egress, egress.Options{Dial: o.Dial}); err != nil {
			return nil, err
		}
		spec.Env = append(spec.Env, r.proxy.Env()...)
		spec.OnSandbox = r.proxy.Attach
	}
	r.spec = spec
	return r, nil
}

// executable checks the program and pins scripts (and any executable with a sha256):
// it returns the absolute path to execute.
func (r *Run) executable() (string, []procexec.Mount, error) {
	ex := r.env.Executable
	if !filepath.IsAbs(ex.Path) || filepath.Clean(ex.Path) != ex.Path {
		return "", nil, refuse(actuation.CodeScriptExecutableMissing, "executable path %q is not a clean absolute path", ex.Path)
	}
	script := ex.Kind == "script"
	process := ex.Path
	if script && ex.Interpreter != "" {
		fi, err := os.Stat(ex.Interpreter)
		if err != nil || !fi.Mode().IsRegular() {
			return "", nil, refuse(actuation.CodeScriptExecutableMissing, "interpreter %s: %v", ex.Interpreter, errOrNotRegular(err))
		}
		if fi.Mode()&0o111 == 0 {
			return "", nil, refuse(actuation.CodeScriptNotExecutable, "interpreter %s is not executable", ex.Interpreter)
		}
		process = ex.Interpreter
	}
	real, err := filepath.EvalSymlinks(ex.Path)
	if err != nil {
		return "", nil, refuse(actuation.CodeScriptExecutableMissing, "executable %s: %v", ex.Path, err)
	}
	if script {
		if len(r.env.ScriptRoots) == 0 {
			return "", nil, refuse(actuation.CodeActionClassParamsInvalid, "script %s without script roots", ex.Path)
		}
		var roots []string
		for _, root := range r.env.ScriptRoots {
			if rr, err := filepath.EvalSymlinks(root); err == nil {
				roots = append(roots, rr)
			}
		}
		if !dirUnder(real, roots) {
			code := actuation.CodeRootNotAllowed
			if dirUnder(ex.Path, r.env.ScriptRoots) {
				code = actuation.CodeSymlinkEscape
			}
			return "", nil, refuse(code, "script %s resolves to %s, outside the script roots %v", ex.Path, real, r.env.ScriptRoots)
		}
	}
	f, err := os.Open(real)
	if err != nil {
		return "", nil, refuse(actuation.CodeScriptExecutableMissing, "executable %s: %v", ex.Path, err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", nil, refuse(actuation.CodeScriptNotExecutable, "executable %s: %v", ex.Path, errOrNotRegular(err))
	}
	direct := !script || ex.Interpreter == ""
	if direct && fi.Mode()&0o111 == 0 {
		return "", nil, refuse(actuation.CodeScriptNotExecutable, "executable %s has no execute permission", ex.Path)
	}
	if !script && ex.SHA256 == "" {
		return process, nil, nil // a binary without a pin runs in place (read-only)
	}
	if fi.Size() > MaxPinnedBytes {
		return "", nil, refuse(actuation.CodeScriptNotExecutable, "executable %s is %d bytes, above the %d a pinned copy may hold", ex.Path, fi.Size(), MaxPinnedBytes)
	}
	// Read once: the bytes hashed are the bytes that run.
	pin := filepath.Join(r.dir, "pinned")
	out, err := os.OpenFile(pin, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o555)
	if err != nil {
		return "", nil, fmt.Errorf("actionexec: pinned copy: %w", err)
	}
	h := sha256.New()
	n, cerr := io.Copy(io.MultiWriter(out, h), io.LimitReader(f, MaxPinnedBytes+1))
	if err := errors.Join(cerr, out.Close()); err != nil {
		return "", nil, fmt.Errorf("actionexec: copy %s: %w", ex.Path, err)
	}
	if n > MaxPinnedBytes {
		return "", nil, refuse(actuation.CodeScriptNotExecutable, "executable %s grew above %d bytes", ex.Path, MaxPinnedBytes)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	r.digest = "sha256:" + sum
	if ex.SHA256 != "" && ex.SHA256 != sum {
		return "", nil, refuse(actuation.CodeScriptHashMismatch, "%s has sha256 %s, the catalog pins %s", ex.Path, sum, ex.SHA256)
	}
	return process, []procexec.Mount{{Source: pin, Target: ex.Path}}, nil
}

func errOrNotRegular(err error) error {
	if err != nil {
		return err
	}
	return errors.New("not a regular file")
}

func dirUnder(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/") {
			return true
		}
	}
	return false
}

// Spec is the process to start (procexec.Runner.Start).
func (r *Run) Spec() procexec.Spec {
	s := r.spec
	s.Mounts = slices.Clone(r.spec.Mounts)
	return s
}

// ExecutableDigest is the pinned content's digest ("" when not pinned).
func (r *Run) ExecutableDigest() string { return r.digest }

// Finish collects what the envelope observed once the program has ended, commits the
// writes and promotes the artifacts when no cap was reached, and releases everything.
// runFailed says whether the program itself failed (then an egress refusal or cap in the
// transcript is reported as the run's code: it explains the failure).
func (r *Run) Finish(runFailed bool) (Capture, error) {
	c := Capture{ExecutableDigest: r.digest}
	var errs []error
	set := func(code, msg string) {
		if c.Code == "" && code != "" {
			c.Code, c.Message = code, msg
		}
	}
	if r.proxy != nil {
		tr := r.proxy.Close()
		c.Transcript = &tr
	}
	if r.write != nil {
		res, err := r.write.Collect()
		if err != nil {
			errs = append(errs, err)
		} else {
			c.Writes = &res
			if res.Code != "" {
				set(res.Code, res.Message+"; nothing committed")
			} else if err := r.write.Commit(res, r.env.WriteRoot); err != nil {
				if code := string(actuation.CodeOf(err)); code != "" {
					set(code, err.Error())
				} else {
					errs = append(errs, err)
				}
			}
		}
	}
	if r.art != nil {
		res, err := r.art.Collect()
		if err != nil {
			errs = append(errs, err)
		} else {
			c.Artifacts = &res
			if res.Code != "" {
				set(res.Code, res.Message+"; nothing promoted")
			} else if err := r.art.Promote(res, r.store); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if runFailed && c.Transcript != nil && c.Transcript.Code != "" {
		set(c.Transcript.Code, "the egress proxy refused or cut a connection (see the network transcript)")
	}
	errs = append(errs, r.release())
	return c, errors.Join(errs...)
}

// Abort releases everything of a run that will not start (or did not).
func (r *Run) Abort() {
	if r.proxy != nil {
		r.proxy.Close()
	}
	_ = r.release()
}

func (r *Run) release() error {
	var errs []error
	if r.write != nil {
		errs = append(errs, r.write.Close())
		r.write = nil
	}
	if r.art != nil {
		errs = append(errs, r.art.Close())
		r.art = nil
	}
	if r.dir != "" {
		if err := os.RemoveAll(r.dir); err != nil {
			errs = append(errs, fmt.Errorf("actionexec: remove %s: %w", r.dir, err))
		}
		r.dir = ""
	}
	return errors.Join(errs...)
}

// Package hostlocal implements the host-local EnvironmentBackend: an
// environment's roots are directories the node operator admitted in the node
// agent's own configuration file. Nothing is created, copied or deleted on the
// host; the backend only checks, at Allocate and at every Inspect, that each
// requested directory exists and lies inside (or equals) an admitted root after
// symlinks are resolved on both sides. It is processless: Ready right after
// Allocate. No Kubernetes imports.
package hostlocal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
)

// ID is the backend identifier (spec.backend).
const ID = "host-local"

// MaxRoots bounds the roots of one environment (root-invalid above it).
const MaxRoots = 32

// AdmittedRoot is one entry of the node's admitted roots as configured and as
// resolved now.
type AdmittedRoot struct {
	Name     string
	Path     string // as configured
	Resolved string // after EvalSymlinks ("" when unusable)
	Problem  string // why the entry is unusable ("" when usable)
}

// Admitted resolves the configured admitted roots now. Entries that are not
// absolute, do not exist, are not directories, or resolve to the filesystem
// root itself are reported with a Problem and never match (fail closed).
func Admitted(admitted map[string]string) []AdmittedRoot {
	out := make([]AdmittedRoot, 0, len(admitted))
	for name, p := range admitted {
		a := AdmittedRoot{Name: name, Path: p}
		switch {
		case p == "" || !filepath.IsAbs(p):
			a.Problem = "not an absolute path"
		default:
			r, err := filepath.EvalSymlinks(filepath.Clean(p))
			if err != nil {
				a.Problem = fmt.Sprintf("cannot resolve: %v", err)
				break
			}
			fi, err := os.Stat(r)
			switch {
			case err != nil:
				a.Problem = fmt.Sprintf("cannot stat: %v", err)
			case !fi.IsDir():
				a.Problem = "not a directory"
			case r == string(filepath.Separator):
				a.Problem = "the filesystem root itself is never admitted"
			default:
				a.Resolved = r
			}
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Within reports whether the resolved path p equals or lies beneath the
// resolved directory dir (component-wise, not a string prefix).
func Within(p, dir string) bool {
	if dir == "" || dir == string(filepath.Separator) {
		return false
	}
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// CheckDir validates one host directory against the admitted roots: hostPath
// must be non-empty, absolute, clean and an existing directory, and its
// symlink-resolved form must lie inside (or equal) a resolved admitted root.
// It returns the resolved path and the admitted root's name. field names the
// checked value in messages.
func CheckDir(admitted []AdmittedRoot, field, hostPath string) (resolved, admittedName string, err error) {
	switch {
	case hostPath == "":
		return "", "", actuation.Refusef(actuation.CodeRootInvalid, "%s: a host directory is required", field)
	case !filepath.IsAbs(hostPath):
		return "", "", actuation.Refusef(actuation.CodeRootInvalid, "%s: %q must be absolute", field, hostPath)
	case filepath.Clean(hostPath) != hostPath:
		return "", "", actuation.Refusef(actuation.CodeRootInvalid, "%s: %q must be clean (want %q)", field, hostPath, filepath.Clean(hostPath))
	}
	resolved, err = filepath.EvalSymlinks(hostPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", "", actuation.Wrapf(actuation.CodeRootInvalid, err, "%s: %q does not exist", field, hostPath)
		}
		return "", "", actuation.Wrapf(actuation.CodeRootInvalid, err, "%s: %q cannot be resolved", field, hostPath)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return "", "", actuation.Wrapf(actuation.CodeRootInvalid, err, "%s: %q", field, hostPath)
	}
	if !fi.IsDir() {
		return "", "", actuation.Refusef(actuation.CodeRootInvalid, "%s: %q is not a directory", field, hostPath)
	}
	for _, a := range admitted {
		if a.Problem == "" && Within(resolved, a.Resolved) {
			return resolved, a.Name, nil
		}
	}
	if resolved != hostPath {
		return "", "", actuation.Refusef(actuation.CodeRootNotAdmitted, "%s: %q (resolving to %q) is not inside any admitted root", field, hostPath, resolved)
	}
	return "", "", actuation.Refusef(actuation.CodeRootNotAdmitted, "%s: %q is not inside any admitted root", field, hostPath)
}

// Backend is the host-local backend. It is safe for concurrent use.
type Backend struct {
	admitted map[string]string
	draining backends.DrainMarks
}

var _ backends.Backend = (*Backend)(nil)

// New returns the backend. admitted maps root names to absolute directories
// from the node's own configuration file; it is copied. Entries are resolved
// at every check, so a directory created after start-up becomes usable and a
// removed one stops matching.
func New(admitted map[string]string) *Backend {
	cp := make(map[string]string, len(admitted))
	for k, v := range admitted {
		cp[k] = v
	}
	return &Backend{admitted: cp}
}

// ID returns "host-local".
func (b *Backend) ID() string { return ID }

// AdmittedRoots reports the configured admitted roots as resolved now (for the
// WorkbenchNode self-report).
func (b *Backend) AdmittedRoots() []AdmittedRoot { return Admitted(b.admitted) }

// check validates the whole spec and returns the mounted roots.
func (b *Backend) check(spec backends.Spec) ([]backends.MountedRoot, error) {
	if spec.ID == "" {
		return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: empty ID", spec.Ref)
	}
	if len(spec.Roots) == 0 {
		return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: host-local needs at least one root", spec.Ref)
	}
	if len(spec.Roots) > MaxRoots {
		return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: %d roots, at most %d", spec.Ref, len(spec.Roots), MaxRoots)
	}
	admitted := Admitted(b.admitted)
	seen := map[string]bool{}
	resolvedOf := map[string]string{}
	out := make([]backends.MountedRoot, 0, len(spec.Roots))
	for i, r := range spec.Roots {
		field := fmt.Sprintf("roots[%d]", i)
		if ref := actuation.ValidateRootName(r.Name); ref != nil {
			return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: %s.name: %s", spec.Ref, field, ref.Message)
		}
		if seen[r.Name] {
			return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: %s.name %q is duplicated", spec.Ref, field, r.Name)
		}
		seen[r.Name] = true
		if r.Source != "" {
			return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: %s: host-local takes a hostPath, not a source", spec.Ref, field)
		}
		resolved, _, err := CheckDir(admitted, field+".hostPath", r.HostPath)
		if err != nil {
			return nil, fmt.Errorf("environment %s: %w", spec.Ref, err)
		}
		for other, od := range resolvedOf {
			if Within(resolved, od) || Within(od, resolved) {
				return nil, actuation.Refusef(actuation.CodeRootOverlap, "environment %s: %s %q (resolving to %q) is nested in, contains or equals root %s (%q)",
					spec.Ref, field, r.HostPath, resolved, other, od)
			}
		}
		resolvedOf[r.Name] = resolved
		// The mounted path is the resolved one, the directory the admission check
		// accepted: the node agent pins it once (no symlink followed on the way) and
		// works from that descriptor, so a symlink swapped in later is never followed.
		out = append(out, backends.MountedRoot{Name: r.Name, Path: resolved, ReadOnly: r.ReadOnly})
	}
	return out, nil
}

// Allocate checks every root; it creates nothing. A processless environment is
// Ready as soon as its roots are admitted.
func (b *Backend) Allocate(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("allocate %s: %w", spec.Ref, err)
	}
	roots, err := b.check(spec)
	if err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Message: err.Error()}, err
	}
	b.draining.Forget(spec.ID)
	return backends.Status{Phase: backends.PhaseReady, Roots: roots}, nil
}

// Start is a no-op: there is nothing to boot. It re-checks the roots.
func (b *Backend) Start(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	return b.Inspect(ctx, spec)
}

// Inspect re-checks, now, that every root still exists as a directory inside
// an admitted root. A root that vanished or moved out yields Failed with a
// message (and no error: the observation succeeded).
func (b *Backend) Inspect(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("inspect %s: %w", spec.Ref, err)
	}
	roots, err := b.check(spec)
	if err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Message: err.Error()}, nil
	}
	if b.draining.Draining(spec.ID) {
		return backends.Status{Phase: backends.PhaseDraining, Roots: roots}, nil
	}
	return backends.Status{Phase: backends.PhaseReady, Roots: roots}, nil
}

// Drain marks the environment Draining (the node agent stops admitting new
// work; host-local has nothing else to stop).
func (b *Backend) Drain(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("drain %s: %w", spec.Ref, err)
	}
	b.draining.Mark(spec.ID)
	return backends.Status{Phase: backends.PhaseDraining}, nil
}

// Teardown deletes nothing: the directories belong to the user. It forgets the
// environment and reports Closed with no residue.
func (b *Backend) Teardown(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("teardown %s: %w", spec.Ref, err)
	}
	b.draining.Forget(spec.ID)
	return backends.Status{Phase: backends.PhaseClosed, Message: "host directories are left untouched"}, nil
}

// Recover has nothing to sweep (host-local creates no resources); it only
// forgets drain marks of environments the store no longer knows.
func (b *Backend) Recover(ctx context.Context, known map[string]backends.Spec) ([]backends.RecoveryAction, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("recover host-local: %w", err)
	}
	b.draining.Retain(known)
	return nil, nil
}

// Package writecap confines an action's writes (seed 002, class C3
// scoped-fs-write) with caps the kernel enforces while the program runs.
//
// An Area is a fresh tmpfs mounted by the agent on a private host directory,
// sized to the action's total byte cap and its file count cap, and attached in
// the sandbox at the action's write root (procexec.Mount, idmapped like every
// root). The per-file cap is the program's RLIMIT_FSIZE with SIGXFSZ ignored
// (procexec.Spec.FileSizeLimit). So a write past a cap fails in the middle of
// the write: ENOSPC when the area is full, EFBIG when a file reaches the
// per-file limit. Both limits are set one unit above the declared cap, so a
// run that tried to go past it is told apart from one that wrote exactly the
// cap: a file longer than the per-file cap, a total above the total cap, or a
// full area, is a cap reached.
//
// After the run, Collect lists what the program left (path, size, sha256),
// checks the optional path pattern and the kinds (regular files and
// directories only) and names the first cap or rule broken; Commit copies the
// files into the workspace's write root (beneath it, no symlink followed,
// each file written to a temporary sibling and renamed) only when nothing was
// broken. Close unmounts the area and removes it. Nothing the program wrote
// reaches the workspace while it runs.
//
// The total cap is counted by the kernel in pages (each non-empty file takes
// at least one): many small files fill the area before their byte sum reaches
// the cap.
//
// No Kubernetes types are used here.
package writecap

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// Caps.
const (
	MaxBytesTotal   = 1 << 30 // a larger declared total cap is refused (invalid-spec)
	DefaultMaxFiles = 1024
	MaxFiles        = 16384
	MaxPatternLen   = 1024
	copyChunk       = 64 << 10
)

// Policy is a C3 envelope.
type Policy struct {
	MaxBytesTotal   int64
	MaxBytesPerFile int64
	// MaxFiles caps files and directories (0 selects DefaultMaxFiles).
	MaxFiles int
	// PathPattern, when set, is an RE2 regular expression (Go regexp) every
	// written file's path (relative to the write root, "/"-separated) must
	// match in full.
	PathPattern string
}

// File is one file the program left in the area.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // sha256:<hex>
}

// Result is what Collect found.
type Result struct {
	Files      []File `json:"files"`
	BytesTotal int64  `json:"bytesTotal"`
	// Code names the first cap reached or rule broken (empty: none); Path
	// the file it concerns, when one does.
	Code    string `json:"code,omitempty"`
	Path    string `json:"path,omitempty"`
	Message string `json:"message,omitempty"`
}

// Area is one mounted write area.
type Area struct {
	dir     string
	policy  Policy
	pattern *regexp.Regexp
	mounted bool
}

// Validate checks a C3 envelope (refusal.InvalidSpec).
func Validate(p Policy) error {
	switch {
	case p.MaxBytesTotal <= 0 || p.MaxBytesTotal > MaxBytesTotal:
		return actuation.Refusef(actuation.CodeInvalidSpec, "write caps: total %d must be in 1..%d", p.MaxBytesTotal, int64(MaxBytesTotal))
	case p.MaxBytesPerFile <= 0 || p.MaxBytesPerFile > p.MaxBytesTotal:
		return actuation.Refusef(actuation.CodeInvalidSpec, "write caps: per-file %d must be in 1..%d (the total)", p.MaxBytesPerFile, p.MaxBytesTotal)
	case p.MaxFiles < 0 || p.MaxFiles > MaxFiles:
		return actuation.Refusef(actuation.CodeInvalidSpec, "write caps: file count %d must be in 0..%d", p.MaxFiles, MaxFiles)
	case len(p.PathPattern) > MaxPatternLen:
		return actuation.Refusef(actuation.CodeInvalidSpec, "write caps: path pattern longer than %d bytes", MaxPatternLen)
	}
	if p.PathPattern != "" {
		if _, err := compile(p.PathPattern); err != nil {
			return actuation.Refusef(actuation.CodeInvalidSpec, "write caps: path pattern: %v", err)
		}
	}
	return nil
}

func compile(p string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + p + `)$`)
}

// Prepare creates a private directory under base and mounts the area on it.
func Prepare(base string, p Policy) (*Area, error) {
	if err := Validate(p); err != nil {
		return nil, err
	}
	if p.MaxFiles == 0 {
		p.MaxFiles = DefaultMaxFiles
	}
	a := &Area{policy: p}
	if p.PathPattern != "" {
		a.pattern, _ = compile(p.PathPattern)
	}
	dir, err := os.MkdirTemp(base, "writecap-")
	if err != nil {
		return nil, fmt.Errorf("writecap: create the area's mount point under %s: %w", base, err)
	}
	a.dir = dir
	// One byte and one inode above the caps (the root directory takes an
	// inode): a run that tried to pass a cap is told apart from one that
	// reached it exactly. Sizes are rounded up to pages by the kernel.
	opts := "mode=0755,size=" + strconv.FormatInt(p.MaxBytesTotal+1, 10) + ",nr_inodes=" + strconv.Itoa(p.MaxFiles+2)
	if err := mountTmpfs(dir, opts); err != nil {
		_ = os.Remove(dir)
		return nil, actuation.Refusef(actuation.CodeSandboxSetupFailed, "writecap: mount a %d-byte tmpfs on %s: %v", p.MaxBytesTotal, dir, err)
	}
	a.mounted = true
	return a, nil
}

// Dir is the area's host directory.
func (a *Area) Dir() string { return a.dir }

// Mount attaches the area at target inside the sandbox.
func (a *Area) Mount(target string) procexec.Mount {
	return procexec.Mount{Source: a.dir, Target: target, Writable: true}
}

// FileSizeLimit is the RLIMIT_FSIZE for the program (procexec.Spec.FileSizeLimit).
func (a *Area) FileSizeLimit() int64 { return a.policy.MaxBytesPerFile + 1 }

// Collect lists the files in the area and names the first cap reached or
// rule broken. Call it after the program (and everything it started) ended.
func (a *Area) Collect() (Result, error) {
	var res Result
	set := func(code, p, format string, args ...any) {
		if res.Code == "" {
			res.Code, res.Path, res.Message = code, p, fmt.Sprintf(format, args...)
		}
	}
	root, err := fsaccess.OpenRoot(a.dir)
	if err != nil {
		return res, fmt.Errorf("writecap: open the area %s: %w", a.dir, err)
	}
	defer func() { _ = root.Close() }()
	entries := 0
	wr, err := root.Walk("", fsaccess.WalkLimits{MaxEntries: a.policy.MaxFiles + 2, MaxDepth: 64}, func(e *fsaccess.WalkEntry) error {
		entries++
		switch e.Type {
		case fsaccess.TypeDir:
			return nil
		case fsaccess.TypeFile:
		default:
			set(string(actuation.CodeWriteKindForbidden), e.Path, "%s is a %s: only regular files and directories are committed", e.Path, e.Type)
			return nil
		}
		if a.pattern != nil && !a.pattern.MatchString(e.Path) {
			set(string(actuation.CodeWritePathForbidden), e.Path, "%s does not match the declared path pattern", e.Path)
		}
		f, err := e.Open()
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		d, n, err := fsaccess.DigestReader(f)
		if err != nil {
			return fmt.Errorf("writecap: hash %s: %w", e.Path, err)
		}
		if n > a.policy.MaxBytesPerFile {
			set(string(actuation.CodeWriteFileCapReached), e.Path, "%s reached the per-file cap of %d bytes (a write past it failed with EFBIG)", e.Path, a.policy.MaxBytesPerFile)
		}
		res.Files = append(res.Files, File{Path: e.Path, Size: n, SHA256: d})
		res.BytesTotal += n
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("writecap: walk the area %s: %w", a.dir, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(a.dir, &st); err != nil {
		return res, fmt.Errorf("writecap: statfs %s: %w", a.dir, err)
	}
	if res.BytesTotal > a.policy.MaxBytesTotal || st.Bfree == 0 {
		set(string(actuation.CodeWriteTotalCapReached), "", "the write root reached its cap of %d bytes (a write past it failed with ENOSPC)", a.policy.MaxBytesTotal)
	}
	if wr.Truncated || entries > a.policy.MaxFiles || st.Ffree == 0 {
		set(string(actuation.CodeWriteFileCountCapReached), "", "the write root reached its cap of %d files and directories", a.policy.MaxFiles)
	}
	return res, nil
}

// Commit copies res.Files from the area into dest (a host directory: the
// action's write root in the workspace), replacing existing files. It
// refuses (with res.Code) when Collect found a cap reached or a rule broken:
// nothing is committed then.
func (a *Area) Commit(res Result, dest string) error {
	if res.Code != "" {
		return actuation.Refusef(actuation.Code(res.Code), "writecap: nothing committed: %s", res.Message)
	}
	src, err := fsaccess.OpenRoot(a.dir)
	if err != nil {
		return fmt.Errorf("writecap: open the area %s: %w", a.dir, err)
	}
	defer func() { _ = src.Close() }()
	dst, err := fsaccess.OpenRoot(dest)
	if err != nil {
		return fmt.Errorf("writecap: open the write root %s: %w", dest, err)
	}
	defer func() { _ = dst.Close() }()
	for _, f := range res.Files {
		if err := commitFile(src, dst, f); err != nil {
			return fmt.Errorf("writecap: commit %s into %s: %w", f.Path, dest, err)
		}
	}
	return nil
}

func commitFile(src, dst *fsaccess.Root, f File) error {
	if dir := path.Dir(f.Path); dir != "." {
		if _, err := dst.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	in, ent, err := src.OpenRead(f.Path)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	if ent.Size != f.Size {
		return fmt.Errorf("size changed since collection (%d, was %d)", ent.Size, f.Size)
	}
	tmp := fsaccess.Sibling(f.Path, fsaccess.RandomName(".writecap-"))
	out, err := dst.CreateExclusive(tmp, 0o644)
	if err != nil {
		return err
	}
	dg := fsaccess.NewDigester()
	_, cerr := io.CopyBuffer(io.MultiWriter(out, dg), io.LimitReader(in, f.Size+1), make([]byte, copyChunk))
	serr := out.Sync()
	clerr := out.Close()
	if err := errors.Join(cerr, serr, clerr); err != nil {
		_ = dst.Remove(tmp)
		return err
	}
	if dg.Digest() != f.SHA256 {
		_ = dst.Remove(tmp)
		return fmt.Errorf("content changed since collection")
	}
	if err := dst.Rename(tmp, f.Path); err != nil {
		_ = dst.Remove(tmp)
		return err
	}
	return nil
}

// Close unmounts the area and removes its directory.
func (a *Area) Close() error {
	var errs []error
	if a.mounted {
		if err := unmountDetach(a.dir); err != nil {
			errs = append(errs, fmt.Errorf("writecap: unmount %s: %w", a.dir, err))
		} else {
			a.mounted = false
		}
	}
	if !a.mounted {
		if err := os.Remove(a.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("writecap: remove %s: %w", a.dir, err))
		}
	}
	return errors.Join(errs...)
}

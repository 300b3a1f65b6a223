// Package gitexport computes a workspace root's changes as a git-format patch against its
// source commit, on the node agent's side and never in the sandbox (issue 28 item 2).
//
// Nothing of git runs in the workspace. The root is copied through its pinned descriptor
// (fsaccess: openat2 beneath, no symlink followed, every ".git" entry skipped) into a
// scratch work tree the agent owns; the base commit is fetched from the root's repository
// by `git fetch` over file:// into a scratch repository the agent owns, so the workspace's
// repository is only ever read by upload-pack (which git runs in untrusted repositories by
// design: no hooks, protected-config-only pack hooks) and every object received is hashed
// by index-pack, so the base tree is the one the commit id names. Every git process runs
// with a scrubbed environment (no system or global configuration, no hooks, no fsmonitor,
// no prompts), a time cap and capped output; the scratch repository's configuration is
// written by this package alone, so no filter, textconv or external diff driver exists.
package gitexport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Limits bound one export.
type Limits struct {
	// MaxFiles is the most entries the work tree copy may hold (export-invalid above it).
	MaxFiles int
	// MaxBytes is the most bytes the work tree copy may hold.
	MaxBytes int64
	// MaxPatchBytes caps the patch written (artifact-too-large above it).
	MaxPatchBytes int64
	// MaxDepth is the deepest directory level copied.
	MaxDepth int
	// Timeout bounds the whole export, git processes included.
	Timeout time.Duration
}

// Defaults.
const (
	DefaultMaxFiles      = 100_000
	DefaultMaxBytes      = 1 << 30
	DefaultMaxPatchBytes = 64 << 20
	DefaultMaxDepth      = 64
	DefaultTimeout       = 2 * time.Minute
	// MaxPaths is the most paths a restricted export (a FilePatch's files) may name.
	MaxPaths = 256
	// maxGitOutput caps what a git command other than format-patch may print.
	maxGitOutput = 1 << 20
	// maxStderr caps the git diagnostics kept for a refusal message.
	maxStderr = 2 << 10
)

func (l Limits) withDefaults() Limits {
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxPatchBytes <= 0 {
		l.MaxPatchBytes = DefaultMaxPatchBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	return l
}

// Request is one patch export.
type Request struct {
	// Root is the pinned workspace root (not closed here).
	Root *fsaccess.Root
	// Base is the source commit (40 or 64 lowercase hex digits); "" takes the HEAD of the
	// root's own repository (its ".git" directory).
	Base string
	// Paths restricts the patch to these root-relative paths (a FilePatch's files); empty:
	// the whole root.
	Paths []string
	// Subject is the patch's one-line subject.
	Subject string
	// Date is the patch's author and committer date (the Artifact's creation), so one
	// request always yields the same bytes.
	Date time.Time
	// Git is the git executable (absolute); "" looks it up on the agent's PATH.
	Git string
	// ScratchDir is where the scratch repository and work tree are made (agent-owned).
	ScratchDir string
	// Limits bound the export.
	Limits Limits
}

// Result describes a written patch.
type Result struct {
	// Base is the commit the patch applies to.
	Base string
	// Files is the number of files the patch changes.
	Files int
	// Bytes is the patch's size.
	Bytes int64
}

var commitRE = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

func refuse(code actuation.Code, format string, args ...any) error {
	return actuation.Refusef(actuation.Code(string(code)), format, args...)
}

// Patch writes the git-format patch of req.Root's changes against its base commit to w.
func Patch(ctx context.Context, req Request, w io.Writer) (*Result, error) {
	lim := req.Limits.withDefaults()
	if req.Root == nil {
		return nil, refuse(actuation.CodeExportInvalid, "no root to export")
	}
	if req.Base != "" && !commitRE.MatchString(req.Base) {
		return nil, refuse(actuation.CodeExportBaseUnknown, "base %q is not a full commit id", req.Base)
	}
	if len(req.Paths) > MaxPaths {
		return nil, refuse(actuation.CodeExportInvalid, "%d paths; a restricted export names at most %d", len(req.Paths), MaxPaths)
	}
	for _, p := range req.Paths {
		if err := fsaccess.CheckRel(p, true); err != nil {
			return nil, refuse(actuation.CodeExportInvalid, "path %q: %v", p, err)
		}
		if isGitPath(p) {
			return nil, refuse(actuation.CodeExportInvalid, "path %q is repository metadata, never exported", p)
		}
	}
	gitBin := req.Git
	if gitBin == "" {
		var err error
		if gitBin, err = exec.LookPath("git"); err != nil {
			return nil, refuse(actuation.CodeExportFailed, "no git on the node: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	scratch, err := os.MkdirTemp(req.ScratchDir, "gitexport-")
	if err != nil {
		return nil, fmt.Errorf("gitexport: scratch directory in %s: %w", req.ScratchDir, err)
	}
	defer func() { _ = os.RemoveAll(scratch) }()
	g := &gitRunner{bin: gitBin, home: scratch, gitDir: filepath.Join(scratch, "repo"), workTree: filepath.Join(scratch, "wt"),
		index: filepath.Join(scratch, "index"), date: req.Date}
	if err := os.Mkdir(g.workTree, 0o700); err != nil {
		return nil, fmt.Errorf("gitexport: %w", err)
	}
	if _, err := g.run(ctx, nil, "init", "-q", "--template="); err != nil {
		return nil, refuse(actuation.CodeExportFailed, "%v", err)
	}
	// The repository in the root: a real directory named .git (a gitfile or a symlink could
	// name another repository on the node), opened beneath the pinned root and reached by
	// its descriptor, so a path swap after this check cannot redirect the fetch.
	e, err := req.Root.Lstat(".git")
	if err != nil || e.Type != fsaccess.TypeDir {
		return nil, refuse(actuation.CodeExportBaseUnknown, "root %s has no .git directory to read its source commit from", req.Root.Dir())
	}
	repo, err := req.Root.Sub(".git")
	if err != nil {
		return nil, refuse(actuation.CodeExportBaseUnknown, "root %s: opening .git: %v", req.Root.Dir(), err)
	}
	defer func() { _ = repo.Close() }()
	url := fmt.Sprintf("file:///proc/%d/fd/%d", os.Getpid(), repo.FD())
	want := req.Base
	if want == "" {
		want = "HEAD"
	}
	if _, err := g.run(ctx, nil, "fetch", "-q", "--no-tags", "--no-recurse-submodules", "--depth=1", url, want+":refs/export/base"); err != nil {
		return nil, refuse(actuation.CodeExportBaseUnknown, "fetching %s from the root's repository: %v", want, err)
	}
	out, err := g.run(ctx, nil, "rev-parse", "--verify", "refs/export/base^{commit}")
	if err != nil {
		return nil, refuse(actuation.CodeExportBaseUnknown, "reading the fetched base: %v", err)
	}
	base := strings.TrimSpace(string(out))
	if !commitRE.MatchString(base) || (req.Base != "" && base != req.Base) {
		return nil, refuse(actuation.CodeExportBaseUnknown, "the root's repository gave %q for %s", base, want)
	}
	if err := copyTree(req.Root, g.workTree, lim); err != nil {
		return nil, err
	}
	if _, err := g.run(ctx, nil, "read-tree", base); err != nil {
		return nil, refuse(actuation.CodeExportFailed, "read-tree: %v", err)
	}
	add := []string{"add", "-A", "--"}
	if len(req.Paths) > 0 {
		add = append(add, req.Paths...)
	}
	if _, err := g.run(ctx, nil, add...); err != nil {
		return nil, refuse(actuation.CodeExportFailed, "staging the work tree: %v", err)
	}
	tree, err := g.run(ctx, nil, "write-tree")
	if err != nil {
		return nil, refuse(actuation.CodeExportFailed, "write-tree: %v", err)
	}
	names, err := g.run(ctx, nil, "diff-tree", "-r", "-z", "--no-renames", "--name-only", base, strings.TrimSpace(string(tree)))
	if err != nil {
		return nil, refuse(actuation.CodeExportFailed, "diff-tree: %v", err)
	}
	files := bytes.Count(names, []byte{0})
	subject := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, req.Subject)
	if subject == "" {
		subject = "workbench export"
	}
	commit, err := g.run(ctx, strings.NewReader(subject+"\n"), "commit-tree", strings.TrimSpace(string(tree)), "-p", base)
	if err != nil {
		return nil, refuse(actuation.CodeExportFailed, "commit-tree: %v", err)
	}
	cw := &capWriter{w: w, max: lim.MaxPatchBytes}
	if err := g.stream(ctx, cw, "format-patch", "-1", "--stdout", "--binary", "--full-index", "--no-signature",
		"--no-renames", strings.TrimSpace(string(commit))); err != nil {
		if cw.over {
			return nil, refuse(actuation.CodeArtifactTooLarge, "the patch is above %d bytes", lim.MaxPatchBytes)
		}
		return nil, refuse(actuation.CodeExportFailed, "format-patch: %v", err)
	}
	return &Result{Base: base, Files: files, Bytes: cw.n}, nil
}

// isGitPath reports whether rel names a ".git" entry or something beneath one.
func isGitPath(rel string) bool {
	for _, c := range strings.Split(rel, "/") {
		if c == ".git" {
			return true
		}
	}
	return false
}

// copyTree copies root's regular files, directories and symlinks (as links, never
// followed) into dst, skipping every ".git" entry; a special file is skipped too (git
// records none). It refuses above the caps rather than export a partial tree, which would
// read as deletions.
func copyTree(root *fsaccess.Root, dst string, lim Limits) error {
	var total int64
	res, err := root.Walk("", fsaccess.WalkLimits{MaxEntries: lim.MaxFiles, MaxDepth: lim.MaxDepth}, func(w *fsaccess.WalkEntry) error {
		if filepath.Base(w.Path) == ".git" {
			if w.Type == fsaccess.TypeDir {
				return fs.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(w.Path))
		switch w.Type {
		case fsaccess.TypeDir:
			return os.Mkdir(target, 0o700)
		case fsaccess.TypeSymlink:
			return os.Symlink(w.LinkTarget, target)
		case fsaccess.TypeFile:
			total += w.Size
			if total > lim.MaxBytes {
				return refuse(actuation.CodeExportInvalid, "the root holds more than %d bytes; export a subtree or raise the cap", lim.MaxBytes)
			}
			src, err := w.Open()
			if err != nil {
				return err
			}
			defer func() { _ = src.Close() }()
			mode := fs.FileMode(0o600)
			if w.Mode&0o100 != 0 {
				mode = 0o700
			}
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return err
			}
			n, err := io.Copy(f, io.LimitReader(src, w.Size+1))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil && n != w.Size {
				err = refuse(actuation.CodeExportFailed, "%s changed while it was copied", w.Path)
			}
			return err
		}
		return nil
	})
	if err != nil {
		if string(actuation.CodeOf(err)) != "" {
			return err
		}
		return refuse(actuation.CodeExportFailed, "copying the root: %v", err)
	}
	if res.Truncated {
		return refuse(actuation.CodeExportInvalid, "the root holds more than %d entries or %d levels (%s); export refused rather than partial",
			lim.MaxFiles, lim.MaxDepth, strings.Join(res.TruncatedBy, ","))
	}
	return nil
}

// gitRunner runs git in the scratch repository with a scrubbed environment.
type gitRunner struct {
	bin, home, gitDir, workTree, index string
	date                               time.Time
}

// pinned is the configuration every git process gets on its command line (protected
// configuration: a repository cannot override it).
var pinned = []string{
	"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.autocrlf=false",
	"-c", "core.symlinks=true", "-c", "core.filemode=true", "-c", "safe.directory=*",
	"-c", "protocol.allow=never", "-c", "protocol.file.allow=always", "-c", "protocol.version=2",
	"-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false",
	"-c", "format.signature=", "-c", "commit.gpgSign=false", "-c", "submodule.recurse=false",
	"-c", "fetch.recurseSubmodules=false", "-c", "core.quotePath=true", "-c", "i18n.commitEncoding=UTF-8",
}

func (g *gitRunner) env() []string {
	date := strconv.FormatInt(g.date.Unix(), 10) + " +0000"
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + g.home, "LC_ALL=C", "TZ=UTC",
		"GIT_DIR=" + g.gitDir, "GIT_WORK_TREE=" + g.workTree, "GIT_INDEX_FILE=" + g.index,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ATTR_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_NO_REPLACE_OBJECTS=1", "GIT_LITERAL_PATHSPECS=1", "GIT_PROTOCOL_FROM_USER=0", "GIT_ASKPASS=/bin/false",
		"GIT_AUTHOR_NAME=Workbench export", "GIT_AUTHOR_EMAIL=export@workbench.invalid", "GIT_AUTHOR_DATE=" + date,
		"GIT_COMMITTER_NAME=Workbench export", "GIT_COMMITTER_EMAIL=export@workbench.invalid", "GIT_COMMITTER_DATE=" + date,
	}
}

func (g *gitRunner) command(ctx context.Context, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, g.bin, append(append([]string{}, pinned...), args...)...)
	cmd.Env = g.env()
	cmd.Dir = g.home
	// A group of its own: the time cap ends upload-pack and pack children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs git and returns its standard output (at most maxGitOutput bytes).
func (g *gitRunner) run(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	var out bytes.Buffer
	cw := &capWriter{w: &out, max: maxGitOutput}
	cmd := g.command(ctx, args)
	cmd.Stdin = stdin
	err := g.wait(ctx, cmd, cw, args[0])
	if cw.over {
		return nil, fmt.Errorf("git %s printed more than %d bytes", args[0], maxGitOutput)
	}
	return out.Bytes(), err
}

// stream runs git with its standard output going to w.
func (g *gitRunner) stream(ctx context.Context, w io.Writer, args ...string) error {
	return g.wait(ctx, g.command(ctx, args), w, args[0])
}

func (g *gitRunner) wait(ctx context.Context, cmd *exec.Cmd, stdout io.Writer, verb string) error {
	var stderr bytes.Buffer
	cmd.Stdout = stdout
	cmd.Stderr = &capWriter{w: &stderr, max: maxStderr, drop: true}
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("git %s: %w", verb, ctx.Err())
	}
	if err != nil {
		msg := strings.TrimSpace(strings.ToValidUTF8(stderr.String(), "?"))
		var ee *exec.ExitError
		if errors.As(err, &ee) && msg != "" {
			return fmt.Errorf("git %s: %s", verb, msg)
		}
		return fmt.Errorf("git %s: %w", verb, err)
	}
	return nil
}

// capWriter passes at most max bytes to w; beyond it writes fail (or, with drop, are
// discarded).
type capWriter struct {
	w    io.Writer
	max  int64
	n    int64
	over bool
	drop bool
}

var errCap = errors.New("output cap reached")

func (c *capWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.max {
		c.over = true
		if c.drop {
			if keep := c.max - c.n; keep > 0 {
				_, _ = c.w.Write(p[:keep])
				c.n = c.max
			}
			return len(p), nil
		}
		return 0, errCap
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

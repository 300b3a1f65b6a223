// Package patch applies an approved FilePatch (unified diff or structured ops)
// to a workspace root, all-or-nothing: every new content is computed and bounded
// in memory first, then files are written (temp + fsync + rename, beneath the
// root via fsaccess) with backups, and a failure midway rolls back every file
// already written. It has no Kubernetes imports.
package patch

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Caps.
const (
	MaxPatchBytes       = 16 << 20 // patch-too-large: the patch document itself
	MaxFileBytes        = 8 << 20  // patch-too-large: any one file before or after
	MaxTotalBytes       = 32 << 20 // patch-too-large: sum of all new contents
	MaxChangedFilesHard = 256      // patch-too-many-files: Policy.MaxChangedFiles is clamped to this
	defaultCreateMode   = fs.FileMode(0o644)
	dirMode             = fs.FileMode(0o755)
)

// Format of FilePatch content.
type Format string

const (
	FormatUnified    Format = "unified"
	FormatStructured Format = "structured"
)

// Policy is the effective policy of one patch: FilePatch.spec.policy capped by the
// environment's spec.patchPolicy (actuation.CapPatchPolicy). AllowGitMetadata and
// AllowExecutable come only from the environment.
type Policy struct {
	RequireCleanApply bool `json:"requireCleanApply"`
	AllowCreate       bool `json:"allowCreate"`
	AllowDelete       bool `json:"allowDelete"`
	MaxChangedFiles   int  `json:"maxChangedFiles"` // <=0 or >256 means 256
	AllowGitMetadata  bool `json:"allowGitMetadata,omitempty"`
	AllowExecutable   bool `json:"allowExecutable,omitempty"`
}

func (p Policy) hygiene() actuation.EffectivePatchPolicy {
	return actuation.EffectivePatchPolicy{AllowCreate: p.AllowCreate, AllowDelete: p.AllowDelete,
		AllowGitMetadata: p.AllowGitMetadata, AllowExecutable: p.AllowExecutable, MaxChangedFiles: p.MaxChangedFiles}
}

// checkHygiene applies actuation.CheckPatchTarget, keeping its code.
func checkHygiene(pol Policy, p string, existed bool, oldMode, newMode fs.FileMode) error {
	if r := actuation.CheckPatchTarget(pol.hygiene(), p, existed, oldMode, newMode); r != nil {
		return refuse(string(r.Code), "%s: %s", r.Field, r.Message)
	}
	return nil
}

// Request is one patch application.
type Request struct {
	Format  Format
	Content []byte // the patch bytes whose sha256 must equal Digest
	Digest  string // declared "sha256:<hex>"
	Policy  Policy
}

// Op is what happened to one file.
type Op string

const (
	OpCreate  Op = "create"
	OpReplace Op = "replace"
	OpAppend  Op = "append"
	OpDelete  Op = "delete"
	OpModify  Op = "modify" // a unified-diff hunk edit
)

// ChangedFile is FilePatch.status.changedFiles[]. DigestBefore is empty for a
// create, DigestAfter empty for a delete.
type ChangedFile struct {
	Path         string `json:"path"`
	Op           Op     `json:"op"`
	DigestBefore string `json:"digestBefore,omitempty"`
	DigestAfter  string `json:"digestAfter,omitempty"`
}

// StructuredOp is one element of a structured patch (a JSON array of these).
// ExpectDigest, when set, must equal the current file's digest (else patch-dirty).
type StructuredOp struct {
	Op           Op     `json:"op"`
	Path         string `json:"path"`
	Content      string `json:"content,omitempty"`
	ExpectDigest string `json:"expectDigest,omitempty"`
}

// intent is a parsed, policy-checked, not-yet-read change.
type intent struct {
	path      string
	op        Op
	gitFile   *gitdiff.File // unified only
	content   []byte        // structured only
	expect    string        // structured only
	createMod fs.FileMode
}

// change is a fully computed change.
type change struct {
	path       string
	op         Op
	existed    bool
	oldMode    fs.FileMode
	oldDigest  string
	oldContent []byte
	newContent []byte
	newMode    fs.FileMode
	newDigest  string
}

// Result of Plan or Apply.
type Result struct {
	ChangedFiles []ChangedFile `json:"changedFiles"`
	// Warnings are non-fatal facts after a successful commit (a backup that
	// could not be removed).
	Warnings []string `json:"warnings,omitempty"`
}

// Source is where planning reads the targets' present state: for each path,
// whether it exists as a regular file, its content (at most MaxFileBytes) and
// its metadata (Digest of the content, Mode). A Root is read through fsaccess
// (RootSource); an applier that writes elsewhere (a VM guest) brings its own.
// Errors carry the package's codes: a symlink leaving the root is
// patch-outside-root, a non-regular target patch-target-not-regular, a target
// above MaxFileBytes patch-too-large, a parent that is not a directory
// patch-dirty.
type Source interface {
	Current(rel string) (exists bool, content []byte, e fsaccess.Entry, err error)
}

// RootSource reads targets beneath an fsaccess root (what Plan and Apply use), refusing
// every symlink on the way.
func RootSource(root *fsaccess.Root) Source { return rootSource{root.NoSymlinks()} }

type rootSource struct{ root *fsaccess.Root }

func (s rootSource) Current(rel string) (bool, []byte, fsaccess.Entry, error) {
	return current(s.root, rel)
}

// Change is one fully computed change of a planned patch, for an applier other
// than Apply (which writes through fsaccess). OldContent is the content the
// change was computed against (nil for a create), OldDigest its digest ("" for
// a create); NewContent/NewDigest are empty for a delete.
type Change struct {
	Path       string
	Op         Op
	Existed    bool
	OldDigest  string
	OldContent []byte
	NewContent []byte
	NewMode    fs.FileMode
	NewDigest  string
}

// PlanChanges verifies and computes the patch against src without writing
// anything, with every check and cap of Plan, and returns the computed changes
// in patch order.
func PlanChanges(src Source, req Request) ([]Change, error) {
	changes, err := plan(src, req)
	if err != nil {
		return nil, err
	}
	out := make([]Change, 0, len(changes))
	for _, c := range changes {
		out = append(out, Change{Path: c.path, Op: c.op, Existed: c.existed, OldDigest: c.oldDigest, OldContent: c.oldContent,
			NewContent: c.newContent, NewMode: c.newMode, NewDigest: c.newDigest})
	}
	return out, nil
}

// Summarize is the status summary of computed changes (status.changedFiles).
func Summarize(changes []Change) []ChangedFile {
	out := make([]ChangedFile, 0, len(changes))
	for _, c := range changes {
		out = append(out, ChangedFile{Path: c.Path, Op: c.Op, DigestBefore: c.OldDigest, DigestAfter: c.NewDigest})
	}
	return out
}

// Plan verifies and computes the patch without writing anything and returns
// the files it would change. Apply = Plan + write.
func Plan(root *fsaccess.Root, req Request) (*Result, error) {
	changes, err := plan(rootSource{root.NoSymlinks()}, req)
	if err != nil {
		return nil, err
	}
	return &Result{ChangedFiles: summarize(changes)}, nil
}

// Apply verifies, computes and writes the patch all-or-nothing. Every path is resolved
// with no symlink at all (fsaccess.Root.NoSymlinks), when planning and again when
// writing: a directory swapped for a link between the two (say to .git/hooks) is refused
// with patch-outside-root, never followed.
func Apply(root *fsaccess.Root, req Request) (*Result, error) {
	root = root.NoSymlinks()
	changes, err := plan(rootSource{root}, req)
	if err != nil {
		return nil, err
	}
	warnings, err := commit(root, changes)
	if err != nil {
		return nil, err
	}
	return &Result{ChangedFiles: summarize(changes), Warnings: warnings}, nil
}

func summarize(changes []*change) []ChangedFile {
	out := make([]ChangedFile, 0, len(changes))
	for _, c := range changes {
		out = append(out, ChangedFile{Path: c.path, Op: c.op, DigestBefore: c.oldDigest, DigestAfter: c.newDigest})
	}
	return out
}

func refuse(code, format string, args ...any) error {
	return actuation.Refusef(actuation.Code(code), format, args...)
}

func plan(src Source, req Request) ([]*change, error) {
	if len(req.Content) > MaxPatchBytes {
		return nil, refuse(string(actuation.CodePatchTooLarge), "patch is %d bytes, max %d", len(req.Content), MaxPatchBytes)
	}
	if _, err := fsaccess.ParseDigest(req.Digest); err != nil {
		return nil, actuation.Wrapf(actuation.CodeDigestMismatch, err, "declared patch digest is missing or malformed")
	}
	if got := fsaccess.DigestBytes(req.Content); got != req.Digest {
		return nil, refuse(string(actuation.CodeDigestMismatch), "patch digest %s does not match declared %s", got, req.Digest)
	}
	maxFiles := req.Policy.MaxChangedFiles
	if maxFiles <= 0 || maxFiles > MaxChangedFilesHard {
		maxFiles = MaxChangedFilesHard
	}
	var (
		intents []*intent
		err     error
	)
	switch req.Format {
	case FormatUnified:
		intents, err = parseUnified(req.Content, maxFiles)
	case FormatStructured:
		intents, err = parseStructured(req.Content, maxFiles)
	default:
		return nil, refuse(string(actuation.CodePatchMalformed), "unknown patch format %q", req.Format)
	}
	if err != nil {
		return nil, err
	}
	if len(intents) == 0 {
		return nil, refuse(string(actuation.CodePatchMalformed), "patch changes no files")
	}
	if len(intents) > maxFiles {
		return nil, refuse(string(actuation.CodePatchTooManyFiles), "patch changes %d files, max %d", len(intents), maxFiles)
	}
	seen := map[string]bool{}
	for _, in := range intents {
		if err := checkPath(in.path); err != nil {
			return nil, err
		}
		if seen[in.path] {
			return nil, refuse(string(actuation.CodePatchMalformed), "path %q appears more than once", in.path)
		}
		seen[in.path] = true
		if in.op == OpCreate && !req.Policy.AllowCreate {
			return nil, refuse(string(actuation.CodePatchCreateForbidden), "patch creates %q but policy.allowCreate=false", in.path)
		}
		if in.op == OpDelete && !req.Policy.AllowDelete {
			return nil, refuse(string(actuation.CodePatchDeleteForbidden), "patch deletes %q but policy.allowDelete=false", in.path)
		}
		// Lexical hygiene before anything is read: git metadata, and a create's mode.
		newMode := fs.FileMode(0)
		if in.op == OpCreate {
			newMode = in.createMod
		}
		if err := checkHygiene(req.Policy, in.path, in.op != OpCreate, 0, newMode); err != nil {
			return nil, err
		}
	}
	var total int64
	changes := make([]*change, 0, len(intents))
	for _, in := range intents {
		c, err := compute(src, in, req.Policy)
		if err != nil {
			return nil, err
		}
		if err := checkHygiene(req.Policy, c.path, c.existed, c.oldMode, c.newMode); err != nil {
			return nil, err
		}
		total += int64(len(c.newContent))
		if total > MaxTotalBytes {
			return nil, refuse(string(actuation.CodePatchTooLarge), "new contents exceed %d bytes in total", MaxTotalBytes)
		}
		changes = append(changes, c)
	}
	return changes, nil
}

// checkPath applies the lexical rules; absolute and traversal become
// patch-outside-root, other path faults keep their path-* code.
func checkPath(p string) error {
	err := fsaccess.CheckRel(p, true)
	switch string(actuation.CodeOf(err)) {
	case "":
		if strings.HasPrefix(path.Base(p), fsaccess.TempPrefix) || strings.HasPrefix(path.Base(p), fsaccess.BackupPrefix) {
			return refuse(string(actuation.CodePatchMalformed), "path %q uses a name reserved for the agent's temp/backup files", p)
		}
		return nil
	case string(actuation.CodePathAbsolute), string(actuation.CodePathTraversal):
		return actuation.Wrapf(actuation.CodePatchOutsideRoot, err, "path %q is outside the root", p)
	}
	return err
}

// current reads the target's present state (bounded).
func current(root *fsaccess.Root, p string) (exists bool, content []byte, e fsaccess.Entry, err error) {
	e, err = root.Lstat(p)
	switch code := string(actuation.CodeOf(err)); {
	case err == nil:
	case code == string(actuation.CodePathNotFound):
		return false, nil, e, nil
	case code == string(actuation.CodeSymlinkEscape):
		return false, nil, e, actuation.Wrapf(actuation.CodePatchOutsideRoot, err, "path %q resolves outside the root", p)
	case code == string(actuation.CodeNotDirectory):
		return false, nil, e, actuation.Wrapf(actuation.CodePatchDirty, err, "a parent of %q is not a directory", p)
	default:
		return false, nil, e, err
	}
	if e.Type != fsaccess.TypeFile {
		return false, nil, e, refuse(string(actuation.CodePatchTargetNotRegular), "target %q is a %s, not a regular file", p, e.Type)
	}
	content, e, err = root.ReadFile(p, MaxFileBytes)
	switch string(actuation.CodeOf(err)) {
	case "":
		return true, content, e, nil
	case string(actuation.CodeFileTooLarge):
		return false, nil, e, actuation.Wrapf(actuation.CodePatchTooLarge, err, "target %q above %d bytes", p, MaxFileBytes)
	case string(actuation.CodeSymlinkEscape), string(actuation.CodeNotRegularFile):
		return false, nil, e, actuation.Wrapf(actuation.CodePatchTargetNotRegular, err, "target %q changed type while reading", p)
	}
	return false, nil, e, err
}

func compute(src Source, in *intent, pol Policy) (*change, error) {
	exists, old, e, err := src.Current(in.path)
	if err != nil {
		return nil, err
	}
	c := &change{path: in.path, op: in.op, existed: exists}
	if exists {
		c.oldContent, c.oldDigest = old, e.Digest
		c.oldMode = e.Mode.Perm()
		c.newMode = c.oldMode
	} else {
		c.newMode = in.createMod
	}
	switch {
	case in.op == OpCreate && exists:
		return nil, refuse(string(actuation.CodePatchDirty), "create %q: file already exists", in.path)
	case in.op != OpCreate && !exists:
		return nil, refuse(string(actuation.CodePatchDirty), "%s %q: file does not exist", in.op, in.path)
	}
	if in.expect != "" && in.expect != c.oldDigest {
		return nil, refuse(string(actuation.CodePatchDirty), "%s %q: current digest %s, expected %s", in.op, in.path, c.oldDigest, in.expect)
	}
	if in.gitFile != nil {
		c.newContent, err = applyUnified(in, old, pol)
		if err != nil {
			return nil, err
		}
	} else {
		switch in.op {
		case OpCreate, OpReplace:
			c.newContent = in.content
		case OpAppend:
			if int64(len(old))+int64(len(in.content)) > MaxFileBytes {
				return nil, refuse(string(actuation.CodePatchTooLarge), "append %q: result above %d bytes", in.path, MaxFileBytes)
			}
			c.newContent = append(append(make([]byte, 0, len(old)+len(in.content)), old...), in.content...)
		}
	}
	if len(c.newContent) > MaxFileBytes {
		return nil, refuse(string(actuation.CodePatchTooLarge), "%q: new content above %d bytes", in.path, MaxFileBytes)
	}
	if in.op != OpDelete {
		c.newDigest = fsaccess.DigestBytes(c.newContent)
	}
	return c, nil
}

// ---- structured ----

func parseStructured(content []byte, maxFiles int) ([]*intent, error) {
	dec := json.NewDecoder(bytes.NewReader(content))
	dec.DisallowUnknownFields()
	var ops []StructuredOp
	if err := dec.Decode(&ops); err != nil {
		return nil, actuation.Wrapf(actuation.CodePatchMalformed, err, "structured patch is not a JSON array of {op,path,content,expectDigest}")
	}
	if dec.More() {
		return nil, refuse(string(actuation.CodePatchMalformed), "trailing data after structured patch")
	}
	if len(ops) > maxFiles {
		return nil, refuse(string(actuation.CodePatchTooManyFiles), "patch has %d operations, max %d", len(ops), maxFiles)
	}
	out := make([]*intent, 0, len(ops))
	for i, op := range ops {
		switch op.Op {
		case OpCreate, OpReplace, OpAppend:
		case OpDelete:
			if op.Content != "" {
				return nil, refuse(string(actuation.CodePatchMalformed), "op %d: delete carries content", i)
			}
		default:
			return nil, refuse(string(actuation.CodePatchMalformed), "op %d: unknown op %q (create|replace|append|delete)", i, op.Op)
		}
		if op.ExpectDigest != "" {
			if _, err := fsaccess.ParseDigest(op.ExpectDigest); err != nil {
				return nil, actuation.Wrapf(actuation.CodePatchMalformed, err, "op %d: expectDigest", i)
			}
			if op.Op == OpCreate {
				return nil, refuse(string(actuation.CodePatchMalformed), "op %d: create cannot carry expectDigest", i)
			}
		}
		out = append(out, &intent{path: op.Path, op: op.Op, content: []byte(op.Content), expect: op.ExpectDigest, createMod: defaultCreateMode})
	}
	return out, nil
}

// ---- unified ----

func parseUnified(content []byte, maxFiles int) ([]*intent, error) {
	files, _, err := gitdiff.Parse(bytes.NewReader(content))
	if err != nil {
		return nil, actuation.Wrapf(actuation.CodePatchMalformed, err, "unified diff does not parse")
	}
	if len(files) > maxFiles {
		return nil, refuse(string(actuation.CodePatchTooManyFiles), "patch changes %d files, max %d", len(files), maxFiles)
	}
	// go-gitdiff strips one leading component from `diff --git` names but keeps
	// traditional `--- a/x` / `+++ b/x` names verbatim; strip a/ b/ there.
	gitHeaders := countGitHeaders(content)
	traditional := gitHeaders == 0
	if !traditional && gitHeaders != len(files) {
		return nil, refuse(string(actuation.CodePatchMalformed), "diff mixes git and traditional file headers")
	}
	out := make([]*intent, 0, len(files))
	for _, f := range files {
		if f.IsRename || f.IsCopy {
			return nil, refuse(string(actuation.CodePatchRenameUnsupported), "rename/copy %q -> %q is not supported; send delete + create", f.OldName, f.NewName)
		}
		if f.IsBinary || f.BinaryFragment != nil {
			return nil, refuse(string(actuation.CodePatchBinaryUnsupported), "binary patch for %q is not supported", nameOf(f))
		}
		in := &intent{gitFile: f, createMod: defaultCreateMode}
		switch {
		case f.IsNew:
			in.op, in.path = OpCreate, f.NewName
			m, err := regularMode(f.NewMode, f.NewName)
			if err != nil {
				return nil, err
			}
			if m != 0 {
				in.createMod = m
			}
		case f.IsDelete:
			in.op, in.path = OpDelete, f.OldName
			if _, err := regularMode(f.OldMode, f.OldName); err != nil {
				return nil, err
			}
		default:
			in.op, in.path = OpModify, f.NewName
			if f.OldName != f.NewName {
				return nil, refuse(string(actuation.CodePatchRenameUnsupported), "old name %q differs from new name %q", f.OldName, f.NewName)
			}
			if f.OldMode != 0 && f.NewMode != 0 && f.OldMode != f.NewMode {
				return nil, refuse(string(actuation.CodePatchModeUnsupported), "mode change on %q (%o -> %o) is not supported", f.NewName, f.OldMode, f.NewMode)
			}
			if _, err := regularMode(f.OldMode, f.OldName); err != nil {
				return nil, err
			}
			if len(f.TextFragments) == 0 {
				return nil, refuse(string(actuation.CodePatchModeUnsupported), "%q has no text hunks (mode-only or empty change)", f.NewName)
			}
		}
		if traditional {
			in.path = stripTraditionalPrefix(in.path)
		}
		out = append(out, in)
	}
	return out, nil
}

func nameOf(f *gitdiff.File) string {
	if f.NewName != "" {
		return f.NewName
	}
	return f.OldName
}

func countGitHeaders(content []byte) int {
	n := 0
	for _, line := range bytes.Split(content, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("diff --git ")) {
			n++
		}
	}
	return n
}

func stripTraditionalPrefix(p string) string {
	if strings.HasPrefix(p, "a/") || strings.HasPrefix(p, "b/") {
		return p[2:]
	}
	return p
}

// regularMode accepts git modes 100644/100755 (or none) and refuses symlinks,
// submodules and anything else.
func regularMode(m fs.FileMode, name string) (fs.FileMode, error) {
	switch m {
	case 0:
		return 0, nil
	case 0o100644:
		return 0o644, nil
	case 0o100755:
		return 0o755, nil
	}
	return 0, refuse(string(actuation.CodePatchModeUnsupported), "%q has git mode %o; only regular files (100644/100755) are supported", name, m)
}

// limitedBuffer refuses writes beyond max.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

var errOverflow = errors.New("new content above cap")

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if l.Len()+len(p) > l.max {
		return 0, errOverflow
	}
	return l.Buffer.Write(p)
}

func applyUnified(in *intent, old []byte, pol Policy) ([]byte, error) {
	f := in.gitFile
	if pol.RequireCleanApply && in.op != OpCreate {
		if p := f.OldOIDPrefix; p != "" && strings.Trim(p, "0") != "" {
			if id := gitBlobID(old, len(p)); !strings.HasPrefix(id, p) {
				return nil, refuse(string(actuation.CodePatchDirty), "%q: base blob %s does not match the diff's index %s", in.path, id, p)
			}
		}
	}
	out := &limitedBuffer{max: MaxFileBytes}
	if err := gitdiff.Apply(out, bytes.NewReader(old), f); err != nil {
		if errors.Is(err, errOverflow) {
			return nil, refuse(string(actuation.CodePatchTooLarge), "%q: new content above %d bytes", in.path, MaxFileBytes)
		}
		// go-gitdiff has no fuzz: any mismatch is a real conflict, whatever
		// RequireCleanApply says.
		return nil, actuation.Wrapf(actuation.CodePatchDirty, err, "%q does not apply cleanly", in.path)
	}
	if pol.RequireCleanApply && in.op != OpDelete {
		if p := f.NewOIDPrefix; p != "" && strings.Trim(p, "0") != "" {
			if id := gitBlobID(out.Bytes(), len(p)); !strings.HasPrefix(id, p) {
				return nil, refuse(string(actuation.CodePatchDirty), "%q: result blob %s does not match the diff's index %s", in.path, id, p)
			}
		}
	}
	return out.Bytes(), nil
}

// gitBlobID is git's object id of a blob (hash of "blob <len>\0" + data), used
// only to check a diff's `index` line under RequireCleanApply. A prefix longer
// than 40 hex digits comes from a SHA-256 repository.
func gitBlobID(b []byte, prefixLen int) string {
	h := sha1.New()
	if prefixLen > 40 {
		h = sha256.New()
	}
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

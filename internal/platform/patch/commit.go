package patch

import (
	"errors"
	"fmt"
	"io/fs"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// beforeWrite is a test hook called before change i is written.
var beforeWrite func(i int, path string) error

// done records what was written so it can be undone.
type done struct {
	c           *change
	backup      string   // hard link (or copy) of the prior inode
	createdDirs []string // parents created for a new file, outermost first
	wrote       bool     // the target was replaced/created/removed
}

func parentOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return ""
}

// recheck refuses if the target changed between planning and writing.
func recheck(root *fsaccess.Root, c *change) error {
	exists, _, e, err := current(root, c.path)
	if err != nil {
		return err
	}
	switch {
	case exists != c.existed:
		return refuse(string(actuation.CodePatchDirty), "%q appeared or disappeared since the patch was planned", c.path)
	case exists && e.Digest != c.oldDigest:
		return refuse(string(actuation.CodePatchDirty), "%q changed since the patch was planned (%s, planned against %s)", c.path, e.Digest, c.oldDigest)
	}
	return nil
}

// backup keeps the prior inode under a hidden sibling name: a hard link when the
// filesystem allows it, else a copy of the bytes read during planning.
func backup(root *fsaccess.Root, c *change) (string, error) {
	var err error
	for i := 0; i < 8; i++ {
		name := fsaccess.Sibling(c.path, fsaccess.RandomName(fsaccess.BackupPrefix))
		if err = root.Link(c.path, name); err == nil {
			return name, nil
		}
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err = root.CreateFileAtomic(name, c.oldContent, c.oldMode); err == nil {
			return name, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	return "", err
}

func writeOne(root *fsaccess.Root, c *change, d *done) error {
	switch {
	case c.op == OpDelete:
		name := fsaccess.Sibling(c.path, fsaccess.RandomName(fsaccess.BackupPrefix))
		if err := root.RenameNoReplace(c.path, name); err != nil {
			return err
		}
		d.backup, d.wrote = name, true
		return root.SyncDir(parentOf(c.path))
	case !c.existed:
		created, err := root.MkdirAll(parentOf(c.path), dirMode)
		d.createdDirs = created
		if err != nil {
			return err
		}
		if err := root.CreateFileAtomic(c.path, c.newContent, c.newMode); err != nil {
			return err
		}
		d.wrote = true
		return nil
	default:
		name, err := backup(root, c)
		if err != nil {
			return err
		}
		d.backup = name
		if err := root.WriteFileAtomic(c.path, c.newContent, c.newMode); err != nil {
			return err
		}
		d.wrote = true
		return nil
	}
}

func undo(root *fsaccess.Root, d *done) error {
	var errs []error
	c := d.c
	switch {
	case c.op == OpDelete:
		if d.wrote {
			errs = append(errs, root.Rename(d.backup, c.path))
		}
	case !c.existed:
		if d.wrote {
			errs = append(errs, root.Remove(c.path))
		}
		for i := len(d.createdDirs) - 1; i >= 0; i-- {
			errs = append(errs, root.Remove(d.createdDirs[i]))
		}
	default:
		if d.backup != "" {
			if d.wrote {
				errs = append(errs, root.Rename(d.backup, c.path))
			} else {
				errs = append(errs, root.Remove(d.backup))
			}
		}
	}
	syncDir := parentOf(c.path)
	if len(d.createdDirs) > 0 {
		syncDir = parentOf(d.createdDirs[0])
	}
	errs = append(errs, root.SyncDir(syncDir))
	return errors.Join(errs...)
}

// commit writes every change or none. On failure it undoes written changes in
// reverse order and returns the first failure's code (or patch-write-failed for
// an uncoded I/O error); if undoing fails too, patch-rollback-incomplete.
func commit(root *fsaccess.Root, changes []*change) (warnings []string, err error) {
	var log []*done
	fail := func(i int, cause error) error {
		var rerrs []error
		for j := len(log) - 1; j >= 0; j-- {
			if err := undo(root, log[j]); err != nil {
				rerrs = append(rerrs, fmt.Errorf("undo %s: %w", log[j].c.path, err))
			}
		}
		if len(rerrs) > 0 {
			return &actuation.Refusal{
				Code:    actuation.CodePatchRollbackIncomplete,
				Message: fmt.Sprintf("writing %q failed and rollback of %d change(s) was incomplete", changes[i].path, len(log)),
				Cause:   errors.Join(append([]error{cause}, rerrs...)...),
			}
		}
		code := string(actuation.CodeOf(cause))
		if code == "" {
			code = string(actuation.CodePatchWriteFailed)
		}
		return &actuation.Refusal{
			Code:    actuation.Code(code),
			Message: fmt.Sprintf("change %d/%d (%q) failed; %d written change(s) rolled back", i+1, len(changes), changes[i].path, len(log)),
			Cause:   cause,
		}
	}
	for i, c := range changes {
		if beforeWrite != nil {
			if err := beforeWrite(i, c.path); err != nil {
				return nil, fail(i, err)
			}
		}
		if err := recheck(root, c); err != nil {
			return nil, fail(i, err)
		}
		d := &done{c: c}
		log = append(log, d)
		if err := writeOne(root, c, d); err != nil {
			return nil, fail(i, err)
		}
	}
	// Committed: drop backups. A leftover backup does not undo the commit; it
	// is reported so the caller can surface it.
	for _, d := range log {
		if d.backup != "" {
			if err := root.Remove(d.backup); err != nil {
				warnings = append(warnings, fmt.Sprintf("backup %s of %s not removed: %v", d.backup, d.c.path, err))
			}
		}
	}
	return warnings, nil
}

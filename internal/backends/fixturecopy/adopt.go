package fixturecopy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

var _ backends.Adopter = (*Backend)(nil)

// Adopt moves the managed copies of from.ID to to.ID (a warm pool member adopted by its
// claimer): one rename of <fixtures>/<from.ID> to <fixtures>/<to.ID>, then each root's
// copy.json names to.ID. The copies' contents are not touched. It is idempotent: nothing
// under from.ID and a directory under to.ID is an adoption already done. A crash between
// the rename and the records leaves copies whose records name from.ID: Allocate of to then
// finds them incomplete and copies afresh (never serving a copy as another's).
func (b *Backend) Adopt(ctx context.Context, from, to backends.Spec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("adopt %s into %s: %w", from.Ref, to.Ref, err)
	}
	for _, id := range []string{from.ID, to.ID} {
		if err := validID(id); err != nil {
			return err
		}
	}
	if from.ID == to.ID {
		return actuation.Refusef(actuation.CodeRootInvalid, "adopt %s: source and target are the same environment", to.Ref)
	}
	// Lock both IDs in one order, so two adoptions never wait on each other.
	first, second := from.ID, to.ID
	if second < first {
		first, second = second, first
	}
	defer b.lock(first)()
	defer b.lock(second)()
	fx, err := b.openFixtures()
	if err != nil {
		return err
	}
	defer func() { _ = fx.Close() }()
	if _, err := fx.Lstat(from.ID); errors.Is(err, fs.ErrNotExist) {
		if e, err := fx.Lstat(to.ID); err == nil && e.Type == fsaccess.TypeDir {
			return nil // done by an earlier pass
		}
		return actuation.Refusef(actuation.CodeRootInvalid, "adopt %s into %s: no managed copies under %s", from.Ref, to.Ref, from.ID)
	} else if err != nil {
		return err
	}
	if err := b.moveDirOrDisk(fx, from.ID, to.ID); err != nil {
		return fmt.Errorf("adopt %s into %s: %w", from.Ref, to.Ref, err)
	}
	entries, err := listNames(fx, to.ID)
	if err != nil {
		return err
	}
	for _, de := range entries {
		if de.typ != fsaccess.TypeDir || actuation.ValidateRootName(de.name) != nil {
			continue
		}
		rel := to.ID + "/" + de.name
		rec := readRecord(fx, rel)
		if rec == nil {
			continue // an incomplete copy: Allocate redoes it
		}
		rec.ID = to.ID
		data, err := json.Marshal(rec)
		if err == nil {
			err = replaceUnsynced(fx, rel+"/"+RecordName, data)
		}
		if err != nil {
			return fmt.Errorf("adopt %s into %s: record of root %q: %w", from.Ref, to.Ref, de.name, err)
		}
	}
	b.draining.Forget(from.ID)
	b.draining.Forget(to.ID)
	return nil
}

// replaceUnsynced writes data to a new file beside rel and renames it over rel, without the
// fsyncs of WriteFileAtomic (two per root, most of an adoption's cost on a busy disk).
// Readers see the old or the new record, never a mix. A crash may lose the new record or
// (on a file system without rename-over ordering) leave it empty: either way the copy no
// longer proves itself complete for the claimer, and Allocate copies afresh — never serving
// a copy as another's. The rename of the environment directory before it is not fsynced
// either, for the same reason.
func replaceUnsynced(fx *fsaccess.Root, rel string, data []byte) error {
	tmp := fsaccess.Sibling(rel, fsaccess.RandomName(fsaccess.TempPrefix))
	f, err := fx.CreateExclusive(tmp, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = fx.Rename(tmp, rel)
	}
	if werr != nil {
		_ = fx.Remove(tmp)
		return fmt.Errorf("writing %s: %w", rel, werr)
	}
	return nil
}

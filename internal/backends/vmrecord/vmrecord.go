// Package vmrecord is the durable, strictly read recovery record of a VM backend (the
// QEMU microVM and the vfkit full-system backends): one JSON file per VM directory,
// replaced atomically and durably (temp file, fsync, rename, directory fsync) and read
// back bounded, with unknown fields and trailing data refused. What the record holds, its
// schema and its validation stay with each backend.
package vmrecord

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// TmpPrefix starts the name of a working file WriteFileAtomic has not renamed yet; a
// backend clearing a VM directory removes what carries it.
const TmpPrefix = ".tmp-"

// ErrNoRecord: the directory holds no record.
var ErrNoRecord = errors.New("no recovery record")

// Write encodes v as indented JSON (at most limit bytes) and replaces dir/name with it,
// mode 0600, atomically and durably.
func Write(dir, name string, v any, limit int) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	if len(data) > limit {
		return fmt.Errorf("record of %d bytes exceeds %d", len(data), limit)
	}
	return WriteFileAtomic(dir, name, data, 0o600)
}

// Read decodes dir/name into v strictly: at most limit bytes, unknown fields and trailing
// data refused. A missing file is ErrNoRecord.
func Read(dir, name string, limit int, v any) error {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ErrNoRecord
		}
		return fmt.Errorf("read record: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return fmt.Errorf("read record: %w", err)
	}
	if len(data) > limit {
		return fmt.Errorf("record larger than %d bytes", limit)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode record: %w", err)
	}
	if dec.More() {
		return errors.New("decode record: trailing data")
	}
	return nil
}

// WriteFileAtomic replaces dir/name with data (mode) durably: a temp file (TmpPrefix),
// fsync, rename, directory fsync. A failed write leaves the old file.
func WriteFileAtomic(dir, name string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(dir, TmpPrefix+name+"-")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp) // the write already failed; a leftover is a TmpPrefix working file
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	ok = true
	return SyncDir(dir)
}

// SyncDir fsyncs a directory (a rename or a removal in it is durable after).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// MaxDirEntries bounds the directory listings of a recovery sweep.
const MaxDirEntries = 10_000

// ListDir lists a directory's names (at most MaxDirEntries, sorted); a missing directory
// is empty.
func ListDir(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer func() { _ = f.Close() }()
	names, err := f.Readdirnames(MaxDirEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	if len(names) > MaxDirEntries {
		return nil, fmt.Errorf("%s holds more than %d entries", dir, MaxDirEntries)
	}
	sort.Strings(names)
	return slices.Clip(names), nil
}

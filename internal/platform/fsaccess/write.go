package fsaccess

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// Bounds for destructive helpers.
const (
	MaxRemoveEntries = 1_000_000 // too-many-entries: RemoveAll refuses above this
	MaxRemoveDepth   = 256       // too-many-entries: RemoveAll refuses deeper trees
	maxNameRetries   = 8
)

// TempPrefix and BackupPrefix name the agent's transient files beside a target.
const (
	TempPrefix   = ".wbtmp-"
	BackupPrefix = ".wbbak-"
)

// RandomName returns prefix + 16 random hex characters.
func RandomName(prefix string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("fsaccess: crypto/rand: %v", err)) // never fails on Linux
	}
	return prefix + hex.EncodeToString(b[:])
}

// Sibling returns the path of name in rel's parent directory.
func Sibling(rel, name string) string {
	dir, _ := splitParent(rel)
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

func (r *Root) writeErr(op, rel string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return actuation.Wrapf(actuation.CodePathNotFound, err, "%s %s", op, r.display(rel))
	case errors.Is(err, unix.ELOOP):
		return actuation.Wrapf(actuation.CodeSymlinkEscape, err, "%s %s: writes never follow a final symlink", op, r.display(rel))
	case errors.Is(err, unix.ENOTDIR):
		return actuation.Wrapf(actuation.CodeNotDirectory, err, "%s %s", op, r.display(rel))
	}
	return fmt.Errorf("fsaccess: %s %s: %w", op, r.display(rel), err)
}

// CreateExclusive creates rel (which must not exist) for writing with exactly
// perm&0o777 (umask is overridden). A final symlink is never followed.
func (r *Root) CreateExclusive(rel string, perm fs.FileMode) (*os.File, error) {
	if err := CheckRel(rel, true); err != nil {
		return nil, err
	}
	fd, err := r.open(rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, uint32(perm&0o777))
	if err != nil {
		return nil, err
	}
	if err := r.setModeOwner(fd, rel, perm); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return r.fileFromFd(fd, rel), nil
}

// OpenForWrite opens the existing regular file rel for writing (no truncation,
// no creation, no final-symlink following).
func (r *Root) OpenForWrite(rel string) (*os.File, error) {
	if err := CheckRel(rel, true); err != nil {
		return nil, err
	}
	fd, err := r.open(rel, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err != nil {
			return nil, r.writeErr("fstat", rel, err)
		}
		return nil, actuation.Refusef(actuation.CodeNotRegularFile, "open for write %s: not a regular file", r.display(rel))
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, r.writeErr("open for write", rel, err)
	}
	return r.fileFromFd(fd, rel), nil
}

func (r *Root) twoParents(oldRel, newRel string) (ofd int, obase string, nfd int, nbase string, err error) {
	if err = CheckRel(oldRel, true); err != nil {
		return
	}
	if err = CheckRel(newRel, true); err != nil {
		return
	}
	if ofd, obase, err = r.openParent(oldRel); err != nil {
		return
	}
	if nfd, nbase, err = r.openParent(newRel); err != nil {
		unix.Close(ofd)
	}
	return
}

// Rename atomically renames oldRel to newRel (replacing newRel), both beneath
// the root. Neither final component is followed.
func (r *Root) Rename(oldRel, newRel string) error {
	return r.rename(oldRel, newRel, 0)
}

// RenameNoReplace is Rename that refuses (EEXIST) when newRel exists.
func (r *Root) RenameNoReplace(oldRel, newRel string) error {
	return r.rename(oldRel, newRel, renameNoReplace)
}

func (r *Root) rename(oldRel, newRel string, flags uint) error {
	ofd, obase, nfd, nbase, err := r.twoParents(oldRel, newRel)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	defer unix.Close(nfd)
	if err := renameat2(ofd, obase, nfd, nbase, flags); err != nil {
		return r.writeErr("rename "+oldRel+" ->", newRel, err)
	}
	return nil
}

// Link creates newRel as a hard link to oldRel (oldRel is not dereferenced).
func (r *Root) Link(oldRel, newRel string) error {
	ofd, obase, nfd, nbase, err := r.twoParents(oldRel, newRel)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	defer unix.Close(nfd)
	if err := unix.Linkat(ofd, obase, nfd, nbase, 0); err != nil {
		return r.writeErr("link "+oldRel+" ->", newRel, err)
	}
	return nil
}

// Remove deletes the file, symlink (not its target) or empty directory rel.
func (r *Root) Remove(rel string) error {
	pfd, base, err := r.checkedParent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	err = unix.Unlinkat(pfd, base, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		var st unix.Stat_t
		if unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
		}
	}
	if err != nil {
		return r.writeErr("remove", rel, err)
	}
	return nil
}

// Mkdir creates the directory rel with exactly perm&0o777.
func (r *Root) Mkdir(rel string, perm fs.FileMode) error {
	pfd, base, err := r.checkedParent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, base, uint32(perm&0o777)); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("fsaccess: mkdir %s: %w", r.display(rel), fs.ErrExist)
		}
		return r.writeErr("mkdir", rel, err)
	}
	fd, err := openBeneath(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, r.display(rel))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return r.setModeOwner(fd, rel, perm)
}

// MkdirAll creates rel and any missing parents (each with perm) and returns the
// directories it created, outermost first, so a caller can roll them back.
func (r *Root) MkdirAll(rel string, perm fs.FileMode) ([]string, error) {
	if err := CheckRel(rel, false); err != nil {
		return nil, err
	}
	if rel == "" {
		return nil, nil
	}
	var created []string
	prefix := ""
	for _, comp := range splitAll(rel) {
		if prefix == "" {
			prefix = comp
		} else {
			prefix += "/" + comp
		}
		err := r.Mkdir(prefix, perm)
		switch {
		case err == nil:
			created = append(created, prefix)
		case errors.Is(err, fs.ErrExist):
			e, serr := r.Lstat(prefix)
			if serr != nil {
				return created, serr
			}
			if e.Type == TypeSymlink {
				// Allowed only if it resolves to a directory beneath the root.
				fd, oerr := r.open(prefix, oPath|unix.O_DIRECTORY, 0)
				if oerr != nil {
					return created, oerr
				}
				unix.Close(fd)
			} else if e.Type != TypeDir {
				return created, actuation.Refusef(actuation.CodeNotDirectory, "mkdir %s: exists and is not a directory", r.display(prefix))
			}
		default:
			return created, err
		}
	}
	return created, nil
}

func splitAll(rel string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(rel); i++ {
		if i == len(rel) || rel[i] == '/' {
			out = append(out, rel[start:i])
			start = i + 1
		}
	}
	return out
}

// SyncDir fsyncs the directory rel ("" = the root).
func (r *Root) SyncDir(rel string) error {
	if err := CheckRel(rel, false); err != nil {
		return err
	}
	fd, err := r.open(kernelPath(rel), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return r.writeErr("fsync", rel, err)
	}
	return nil
}

// WriteFileAtomic writes data to a temp file beside rel, fsyncs it, renames it
// over rel and fsyncs the directory. Readers see the old or the new content,
// never a mix.
func (r *Root) WriteFileAtomic(rel string, data []byte, perm fs.FileMode) error {
	return r.writeAtomic(rel, data, perm, false)
}

// CreateFileAtomic is WriteFileAtomic that refuses (fs.ErrExist) if rel exists.
func (r *Root) CreateFileAtomic(rel string, data []byte, perm fs.FileMode) error {
	return r.writeAtomic(rel, data, perm, true)
}

func (r *Root) writeAtomic(rel string, data []byte, perm fs.FileMode, noReplace bool) error {
	if err := CheckRel(rel, true); err != nil {
		return err
	}
	var (
		f   *os.File
		tmp string
		err error
	)
	for i := 0; i < maxNameRetries; i++ {
		tmp = Sibling(rel, RandomName(TempPrefix))
		f, err = r.CreateExclusive(tmp, perm)
		if err == nil || !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = r.Remove(tmp)
		return fmt.Errorf("fsaccess: write %s: %w", r.display(tmp), werr)
	}
	if noReplace {
		err = r.RenameNoReplace(tmp, rel)
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("fsaccess: create %s: %w", r.display(rel), fs.ErrExist)
		}
	} else {
		err = r.Rename(tmp, rel)
	}
	if err != nil {
		_ = r.Remove(tmp)
		return err
	}
	dir, _ := splitParent(rel)
	if dir == "." {
		dir = ""
	}
	return r.SyncDir(dir)
}

// RemoveAll deletes rel and everything beneath it, never following symlinks
// (a symlink is unlinked, its target untouched). Missing rel is not an error.
// Refuses (too-many-entries) above MaxRemoveEntries or MaxRemoveDepth.
func (r *Root) RemoveAll(rel string) error {
	pfd, base, err := r.checkedParent(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer unix.Close(pfd)
	budget := MaxRemoveEntries
	return r.removeAllAt(pfd, base, rel, 0, &budget)
}

func (r *Root) removeAllAt(dirfd int, name, rel string, depth int, budget *int) error {
	*budget--
	if *budget < 0 {
		return actuation.Refusef(actuation.CodeTooManyEntries, "remove %s: more than %d entries", r.display(rel), MaxRemoveEntries)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return r.writeErr("lstat", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return r.writeErr("unlink", rel, err)
		}
		return nil
	}
	if depth >= MaxRemoveDepth {
		return actuation.Refusef(actuation.CodeTooManyEntries, "remove %s: deeper than %d", r.display(rel), MaxRemoveDepth)
	}
	fd, err := openBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, r.display(rel))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// Re-list until empty: entries created concurrently are picked up, bounded by budget.
	for {
		names, _, err := readNames(fd, *budget+1)
		if err != nil {
			return r.writeErr("readdir", rel, err)
		}
		if len(names) == 0 {
			break
		}
		for _, n := range names {
			if err := r.removeAllAt(fd, n, rel+"/"+n, depth+1, budget); err != nil {
				return err
			}
		}
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return r.writeErr("rewinddir", rel, err)
		}
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return r.writeErr("rmdir", rel, err)
	}
	return nil
}

// Chmod sets exactly perm&0o777 on the file or directory rel (never through a
// final symlink: the path is opened O_NOFOLLOW and changed with fchmod).
func (r *Root) Chmod(rel string, perm fs.FileMode) error {
	if err := CheckRel(rel, true); err != nil {
		return err
	}
	fd, err := r.open(rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return r.setModeOwner(fd, rel, perm)
}

// SyncFS flushes the whole filesystem holding the root (one syncfs(2) instead
// of an fsync per file after a bulk copy).
func (r *Root) SyncFS() error {
	fd, err := r.open(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := syncfs(fd); err != nil {
		return fmt.Errorf("fsaccess: syncfs %s: %w", r.dir, err)
	}
	return nil
}

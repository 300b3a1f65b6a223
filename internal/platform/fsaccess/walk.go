package fsaccess

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// Walk caps (defaults used when a limit is <= 0).
const (
	DefaultMaxEntries = 10_000 // Snapshot/Walk: Truncated="max-entries"
	DefaultMaxDepth   = 32     // Snapshot/Walk: Truncated="max-depth"
	direntBufBytes    = 32 << 10
)

// Truncation reasons.
const (
	TruncMaxEntries = "max-entries"
	TruncMaxDepth   = "max-depth"
)

// WalkLimits bound a Walk.
type WalkLimits struct {
	MaxEntries int // entries reported (files, dirs, symlinks, others)
	MaxDepth   int // directory levels below the start (start's children are depth 1)
}

func (l WalkLimits) withDefaults() WalkLimits {
	l.MaxEntries = actuation.OrDefault(l.MaxEntries, DefaultMaxEntries)
	l.MaxDepth = actuation.OrDefault(l.MaxDepth, DefaultMaxDepth)
	return l
}

// WalkResult reports whether a cap cut the walk short.
type WalkResult struct {
	Entries     int
	Truncated   bool
	TruncatedBy []string
}

func (w *WalkResult) trunc(reason string) {
	w.Truncated = true
	for _, r := range w.TruncatedBy {
		if r == reason {
			return
		}
	}
	w.TruncatedBy = append(w.TruncatedBy, reason)
	sort.Strings(w.TruncatedBy)
}

// WalkEntry is one entry met by Walk. Its metadata comes from fstatat on the
// parent directory fd with AT_SYMLINK_NOFOLLOW; symlinks carry LinkTarget and
// are never followed.
type WalkEntry struct {
	Entry
	Depth int

	root  *Root
	dirfd int
	name  string
}

// Open opens a regular-file entry read-only relative to its parent directory fd
// (openat2, RESOLVE_BENEATH, O_NOFOLLOW, O_NOATIME when permitted) and checks
// that it is still the same inode Walk saw. Valid only during the callback.
func (w *WalkEntry) Open() (*os.File, error) {
	if w.Type != TypeFile {
		return nil, actuation.Refusef(actuation.CodeNotRegularFile, "open %s: not a regular file", w.root.display(w.Path))
	}
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := openBeneath(w.dirfd, w.name, flags|oNoatime, 0, w.root.display(w.Path))
	if errors.Is(err, unix.EPERM) {
		fd, err = openBeneath(w.dirfd, w.name, flags, 0, w.root.display(w.Path))
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Ino != w.ino || statDev(&st) != w.dev || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, actuation.Refusef(actuation.CodeNotRegularFile, "open %s: entry changed during walk", w.root.display(w.Path))
	}
	return os.NewFile(uintptr(fd), w.root.display(w.Path)), nil
}

// readNames reads up to max names (excluding "." and "..") from a directory fd
// with getdents; more reports that further names exist.
func readNames(fd int, max int) (names []string, more bool, err error) {
	buf := make([]byte, direntBufBytes)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if n <= 0 {
			return names, false, nil
		}
		var batch []string
		_, _, batch = unix.ParseDirent(buf[:n], -1, batch)
		for _, name := range batch {
			if name == "." || name == ".." {
				continue
			}
			if len(names) >= max {
				return names, true, nil
			}
			names = append(names, name)
		}
	}
}

// Walk visits rel ("" = root) depth-first in sorted name order without
// following symlinks and without building host paths: each directory is opened
// with openat2 relative to its parent's fd and listed with getdents. The start
// itself is not reported; if rel is not a directory it is reported alone.
// fn may return fs.SkipDir (skips a directory's contents; ignored for other
// entries); any other error stops the walk.
func (r *Root) Walk(rel string, lim WalkLimits, fn func(*WalkEntry) error) (WalkResult, error) {
	lim = lim.withDefaults()
	var res WalkResult
	if err := CheckRel(rel, false); err != nil {
		return res, err
	}
	start, err := r.Lstat(rel)
	if err != nil {
		return res, err
	}
	if start.Type != TypeDir {
		pfd, base, err := r.openParent(rel)
		if err != nil {
			return res, err
		}
		defer unix.Close(pfd)
		res.Entries = 1
		return res, fn(&WalkEntry{Entry: start, Depth: 0, root: r, dirfd: pfd, name: base})
	}
	fd, err := r.open(kernelPath(rel), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return res, err
	}
	defer unix.Close(fd)
	err = r.walkDir(fd, rel, 1, lim, &res, fn)
	if errors.Is(err, errStopWalk) {
		err = nil
	}
	return res, err
}

var errStopWalk = errors.New("walk: cap reached")

func (r *Root) walkDir(dirfd int, prefix string, depth int, lim WalkLimits, res *WalkResult, fn func(*WalkEntry) error) error {
	remaining := lim.MaxEntries - res.Entries
	names, more, err := readNames(dirfd, remaining)
	if err != nil {
		return fmt.Errorf("fsaccess: readdir %s: %w", r.display(prefix), err)
	}
	sort.Strings(names)
	for _, name := range names {
		p := name
		if prefix != "" {
			p = prefix + "/" + name
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // vanished between getdents and fstatat
			}
			return fmt.Errorf("fsaccess: lstat %s: %w", r.display(p), err)
		}
		if res.Entries >= lim.MaxEntries {
			res.trunc(TruncMaxEntries)
			return errStopWalk
		}
		res.Entries++
		we := &WalkEntry{Entry: statToEntry(p, &st), Depth: depth, root: r, dirfd: dirfd, name: name}
		if we.Type == TypeSymlink {
			we.LinkTarget, _ = readlinkAt(dirfd, name)
		}
		err := fn(we)
		if we.Type != TypeDir {
			if err != nil && !errors.Is(err, fs.SkipDir) {
				return err
			}
			continue
		}
		if errors.Is(err, fs.SkipDir) {
			continue
		}
		if err != nil {
			return err
		}
		if depth >= lim.MaxDepth {
			res.trunc(TruncMaxDepth)
			continue
		}
		cfd, err := openBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, r.display(p))
		if err != nil {
			if actuation.CodeOf(err) == actuation.CodePathNotFound {
				continue
			}
			return err
		}
		err = r.walkDir(cfd, p, depth+1, lim, res, fn)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	if more {
		res.trunc(TruncMaxEntries)
		return errStopWalk
	}
	return nil
}

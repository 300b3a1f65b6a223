package fsaccess

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// maxResolveRetries bounds retries on EAGAIN/EINTR (EAGAIN: the kernel could not
// prove a '..' stayed beneath because of a concurrent rename).
const maxResolveRetries = 8

// EntryType classifies a directory entry.
type EntryType string

const (
	TypeFile    EntryType = "file"
	TypeDir     EntryType = "dir"
	TypeSymlink EntryType = "symlink"
	TypeOther   EntryType = "other"
)

// Entry is metadata about one path beneath a root. Symlinks are described, never
// followed; Digest is set only for regular files that were hashed.
type Entry struct {
	Path       string      `json:"path"`
	Type       EntryType   `json:"type"`
	Size       int64       `json:"size"`
	Mode       fs.FileMode `json:"mode"`
	ModTime    time.Time   `json:"modTime"`
	Digest     string      `json:"digest,omitempty"`
	LinkTarget string      `json:"linkTarget,omitempty"`
	// DigestOmitted says why a regular file has no Digest: "over-file-cap",
	// "over-total-cap", "changed-during-read" or "unreadable".
	DigestOmitted string `json:"digestOmitted,omitempty"`

	ino, dev uint64
	ctime    int64 // status change time (ns), for SnapshotCached's cache key
}

// Root is an admitted directory opened once as an O_PATH|O_DIRECTORY fd. All
// accesses are resolved relative to that fd by the kernel. A Root is safe for
// concurrent use; Close must not race with other calls.
type Root struct {
	fd     int
	dir    string
	closed atomic.Bool
	// extra resolve flags of this view (RESOLVE_NO_SYMLINKS for NoSymlinks).
	resolve uint64
	// parent is set on views sharing another Root's descriptor.
	parent *Root
}

// OpenRoot opens dir (an absolute or relative directory path chosen by the
// operator, not by a caller) and verifies that openat2 is usable.
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOTDIR {
			return nil, actuation.Wrapf(actuation.CodeNotDirectory, err, "root %q", dir)
		}
		return nil, fmt.Errorf("fsaccess: open root %q: %w", dir, err)
	}
	r := &Root{fd: fd, dir: dir}
	// Probe: refuse to hand out a Root at all when openat2 is missing.
	probe, err := r.open(".", oPath|unix.O_DIRECTORY, 0)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	unix.Close(probe)
	return r, nil
}

// Dir returns the directory the root was opened from (for messages only).
func (r *Root) Dir() string { return r.dir }

// Close releases the root fd (a view made by NoSymlinks releases nothing).
func (r *Root) Close() error {
	if r.parent != nil {
		return nil
	}
	if r.closed.Swap(true) {
		return nil
	}
	return unix.Close(r.fd)
}

func (r *Root) display(rel string) string {
	if rel == "" {
		return r.dir
	}
	return r.dir + "/" + rel
}

// open resolves rel beneath the root fd. rel must already be lexically checked
// (or be a single component / "." produced internally).
func (r *Root) open(rel string, flags int, mode uint32) (int, error) {
	if r.closed.Load() || (r.parent != nil && r.parent.closed.Load()) {
		return -1, fmt.Errorf("fsaccess: root %q is closed: %w", r.dir, fs.ErrClosed)
	}
	return openResolve(r.fd, rel, flags, mode, r.display(rel), resolveFlags|r.resolve)
}

// openBeneath is the single wrapper around openat2.
func openBeneath(dirfd int, rel string, flags int, mode uint32, display string) (int, error) {
	return openResolve(dirfd, rel, flags, mode, display, resolveFlags)
}

// mapOpenErr turns kernel resolution errors into refusal codes.
func mapOpenErr(err error, display string) error {
	switch {
	case errors.Is(err, unix.ENOSYS):
		return actuation.Wrapf(actuation.CodeOpenat2Unavailable, err, "openat2 is not available; refusing %q (no string-only fallback)", display)
	case errors.Is(err, unix.EXDEV):
		return actuation.Wrapf(actuation.CodeSymlinkEscape, err, "%q resolves outside the root", display)
	case errors.Is(err, unix.ELOOP):
		return actuation.Wrapf(actuation.CodeSymlinkEscape, err, "%q: symlink refused (magic link, loop, or a final symlink where none may be followed)", display)
	case errors.Is(err, unix.ENOENT):
		return actuation.Wrapf(actuation.CodePathNotFound, err, "%q", display)
	case errors.Is(err, unix.ENOTDIR):
		return actuation.Wrapf(actuation.CodeNotDirectory, err, "%q: a path component is not a directory", display)
	}
	return fmt.Errorf("fsaccess: %s: %w", display, err)
}

// openParent opens the parent directory of a checked, non-empty rel (as an
// O_PATH fd) and returns it with the final component. Intermediate symlinks are
// followed only while they stay beneath the root.
func (r *Root) openParent(rel string) (int, string, error) {
	dir, base := splitParent(rel)
	fd, err := r.open(dir, oPath|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", err
	}
	return fd, base, nil
}

// checkedParent is openParent for a rel a caller names: rel is checked (CheckRel, non-empty)
// first, as every write that creates or removes a name does.
func (r *Root) checkedParent(rel string) (int, string, error) {
	if err := CheckRel(rel, true); err != nil {
		return -1, "", err
	}
	return r.openParent(rel)
}

// entryType classifies a Unix mode's file type bits.
func entryType(mode uint32) EntryType {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return TypeFile
	case unix.S_IFDIR:
		return TypeDir
	case unix.S_IFLNK:
		return TypeSymlink
	default:
		return TypeOther
	}
}

// PermMode is the permission part of a Unix mode m as an fs.FileMode: the 0o777 bits and
// setuid, setgid and sticky. Host stats and guest entries (internal/backends/guestfs)
// both report it.
func PermMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

func unixMode(m uint32) fs.FileMode {
	mode := PermMode(m)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	return mode
}

// Lstat describes rel without following a final symlink ("" = the root itself).
func (r *Root) Lstat(rel string) (Entry, error) {
	if err := CheckRel(rel, false); err != nil {
		return Entry{}, err
	}
	var st unix.Stat_t
	if rel == "" {
		fd, err := r.open(".", oPath|unix.O_DIRECTORY, 0)
		if err != nil {
			return Entry{}, err
		}
		defer unix.Close(fd)
		if err := unix.Fstat(fd, &st); err != nil {
			return Entry{}, fmt.Errorf("fsaccess: fstat %s: %w", r.dir, err)
		}
		return statToEntry("", &st), nil
	}
	pfd, base, err := r.openParent(rel)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(pfd)
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Entry{}, mapOpenErr(err, r.display(rel))
	}
	e := statToEntry(rel, &st)
	if e.Type == TypeSymlink {
		e.LinkTarget, _ = readlinkAt(pfd, base)
	}
	return e, nil
}

// maxLinkTarget bounds readlink (PATH_MAX).
const maxLinkTarget = 4096

func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, maxLinkTarget)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// fileFromFd wraps fd in an *os.File named for messages.
func (r *Root) fileFromFd(fd int, rel string) *os.File {
	return os.NewFile(uintptr(fd), r.display(rel))
}

// Sub opens the directory rel (beneath r, final component not a symlink) as a
// new Root. The returned Root must be closed separately.
func (r *Root) Sub(rel string) (*Root, error) {
	if err := CheckRel(rel, true); err != nil {
		return nil, err
	}
	fd, err := r.open(rel, oPath|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	return &Root{fd: fd, dir: r.display(rel)}, nil
}

// NoSymlinks returns a view of r whose resolutions refuse every symlink, intermediate ones
// included (RESOLVE_NO_SYMLINKS, code symlink-escape), so nothing written through it can be
// redirected by a link planted in the tree. It shares r's descriptor: it is usable while r
// is open, and its Close releases nothing.
func (r *Root) NoSymlinks() *Root {
	p := r
	if r.parent != nil {
		p = r.parent
	}
	return &Root{fd: r.fd, dir: r.dir, resolve: r.resolve | resolveNoSymlinks, parent: p}
}

// PinRoot opens the absolute directory dir once, refusing any symlink on the way
// (RESOLVE_NO_SYMLINKS from "/"), so the Root names exactly the directory an admission
// check resolved; later accesses go through its descriptor, never through dir again.
func PinRoot(dir string) (*Root, error) {
	if len(dir) == 0 || dir[0] != '/' {
		return nil, actuation.Refusef(actuation.CodeNotDirectory, "root %q is not an absolute path", dir)
	}
	fd, err := pinOpen(dir)
	if err != nil {
		return nil, err
	}
	return &Root{fd: fd, dir: dir}, nil
}

// Identity is a directory's device and inode numbers.
type Identity struct{ Dev, Ino uint64 }

// Identity returns the device and inode of the root's directory.
func (r *Root) Identity() (Identity, error) {
	var st unix.Stat_t
	if err := unix.Fstat(r.fd, &st); err != nil {
		return Identity{}, fmt.Errorf("fsaccess: fstat root %s: %w", r.dir, err)
	}
	return Identity{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

// PathIdentity stats dir now (following symlinks, as a path consumer would).
func PathIdentity(dir string) (Identity, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return Identity{}, fmt.Errorf("fsaccess: stat %s: %w", dir, err)
	}
	return Identity{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

// FD returns the root's O_PATH descriptor (owned by the Root: never close it) for callers
// that must hand the pinned directory on (a sandbox's bind mount or Landlock rule through
// /proc/self/fd/N).
func (r *Root) FD() int { return r.fd }

package agent

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

// resolveBeneath keeps every resolution beneath the directory fd and never follows
// /proc-style magic links.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

const (
	maxWalkDepth       = 128
	maxResolveRetries  = 8
	maxLinkTarget      = 4096
	maxSnapshotHashing = protocol.MaxTransfer // bytes hashed per snapshot
)

// openat2 opens rel beneath dirfd ("" = dirfd itself), retrying EAGAIN/EINTR a bounded
// number of times (EAGAIN: the kernel could not prove a ".." stayed beneath during a
// concurrent rename).
func openat2(dirfd int, rel string, flags int, mode uint32, resolve uint64) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, rel, &how)
		if err == nil {
			return fd, nil
		}
		if (err == unix.EAGAIN || err == unix.EINTR) && i < maxResolveRetries {
			continue
		}
		return -1, mapErr(err, rel)
	}
}

// mapErr turns kernel errors into stable refusal codes.
func mapErr(err error, rel string) error {
	switch {
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeSymlinkEscape, "%q resolves outside the root (or through a refused link)", rel), err)
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeNotFound, "%q", rel), err)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeNotDirectory, "%q: a component is not a directory", rel), err)
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "openat2 unavailable; no string-path fallback"), err)
	}
	return fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "%q", rel), err)
}

// openDir opens rel beneath the root as an O_PATH directory fd.
func (a *Agent) openDir(rel string) (int, error) {
	return openat2(a.rootFd, rel, unix.O_PATH|unix.O_DIRECTORY, 0, resolveBeneath)
}

func (a *Agent) readFile(args *protocol.ReadArgs) reply {
	fd, err := openat2(a.rootFd, args.Path, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK, 0, resolveBeneath)
	if err != nil {
		return refused(err)
	}
	f := os.NewFile(uintptr(fd), args.Path)
	defer func() { _ = f.Close() }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return refused(mapErr(err, args.Path))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return refused(actuation.Refusef(actuation.CodeNotRegularFile, "%q is not a regular file", args.Path))
	}
	size := st.Size
	var n int64
	if off := int64(args.Offset); off < size {
		n = min(int64(args.Max), size-off)
	}
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, int64(args.Offset))
	if err != nil && err != io.EOF {
		return refused(mapErr(err, args.Path))
	}
	buf = buf[:got]
	return ok(protocol.ReadData{Size: size, Offset: int64(args.Offset), EOF: int64(args.Offset)+int64(got) >= size}, buf)
}

// dirNames lists a directory fd's names, sorted, at most limit (the caller detects
// truncation by asking for one more than it can use).
func dirNames(dirfd int, limit int) ([]string, error) {
	fd, err := openat2(dirfd, "", unix.O_RDONLY|unix.O_DIRECTORY, 0, resolveBeneath)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "dir")
	defer func() { _ = f.Close() }()
	var names []string
	for len(names) < limit {
		batch, err := f.Readdirnames(min(256, limit-len(names)))
		names = append(names, batch...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, mapErr(err, "")
		}
	}
	sort.Strings(names)
	return names, nil
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// walker visits a subtree depth-first in sorted order without following symlinks; every
// directory is opened relative to its parent's fd with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS.
type walker struct {
	ctx     context.Context
	budget  int // entries left
	visit   func(rel string, st *unix.Stat_t, dirfd int, name string) error
	trunc   bool
	visited int
}

var errStopWalk = errors.New("walk budget reached")

func (w *walker) walk(dirfd int, rel string, depth int) error {
	if depth > maxWalkDepth {
		return actuation.Refusef(actuation.CodeTooLarge, "%q is nested deeper than %d", rel, maxWalkDepth)
	}
	names, err := dirNames(dirfd, w.budget+1)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := w.ctx.Err(); err != nil {
			return actuation.Refusef(actuation.CodeDeadlineExceeded, "deadline passed during the walk")
		}
		if w.budget == 0 {
			w.trunc = true
			return errStopWalk
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return mapErr(err, join(rel, name))
		}
		w.budget--
		w.visited++
		if err := w.visit(join(rel, name), &st, dirfd, name); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			cfd, err := openat2(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveBeneath|unix.RESOLVE_NO_SYMLINKS)
			if err != nil {
				if actuation.CodeOf(err) == actuation.CodeNotFound {
					continue
				}
				return err
			}
			err = w.walk(cfd, join(rel, name), depth+1)
			unix.Close(cfd)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func entryType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

func readlinkAt(dirfd int, name string) string {
	buf := make([]byte, maxLinkTarget)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// hashAt hashes the regular file name in dirfd (not following a symlink), at most max
// bytes; it returns "" when the file is larger or unreadable.
func hashAt(dirfd int, name string, size int64, max uint64) string {
	if uint64(size) > max {
		return ""
	}
	fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0, resolveBeneath|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), name)
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, int64(max)+1))
	if err != nil || uint64(n) > max || n != size {
		return ""
	}
	return protocol.DigestPrefix + hex.EncodeToString(h.Sum(nil))
}

func (a *Agent) snapshot(ctx context.Context, args *protocol.SnapshotArgs) reply {
	dfd, err := a.openDir(args.Path)
	if err != nil {
		return refused(err)
	}
	defer unix.Close(dfd)
	out := []byte{'['}
	hashed := uint64(0)
	full := false
	w := &walker{ctx: ctx, budget: int(args.MaxEntries)}
	w.visit = func(rel string, st *unix.Stat_t, dirfd int, name string) error {
		e := protocol.Entry{Path: rel, Type: entryType(st.Mode), Size: st.Size, Mode: st.Mode & 0o7777, MTime: st.Mtim.Nano()}
		switch e.Type {
		case "symlink":
			e.Link = readlinkAt(dirfd, name)
		case "file":
			if args.HashMax > 0 && hashed+uint64(st.Size) <= maxSnapshotHashing {
				if e.Digest = hashAt(dirfd, name, st.Size, args.HashMax); e.Digest != "" {
					hashed += uint64(st.Size)
				}
			}
		}
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("marshal entry: %w", err)
		}
		if len(out)+len(b)+2 > protocol.MaxTransfer {
			full = true
			return errStopWalk
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, b...)
		return nil
	}
	err = w.walk(dfd, "", 0)
	if err != nil && !errors.Is(err, errStopWalk) {
		return refused(err)
	}
	out = append(out, ']')
	n := w.visited
	if full {
		n--
	}
	return ok(protocol.SnapshotData{Entries: uint32(n), Truncated: w.trunc || full}, out)
}

func (a *Agent) export(ctx context.Context, args *protocol.ExportArgs) reply {
	dfd, err := a.openDir(args.Path)
	if err != nil {
		return refused(err)
	}
	defer unix.Close(dfd)
	buf := &protocol.LimitedBuffer{Max: int(args.MaxBytes)}
	tw := tar.NewWriter(buf)
	w := &walker{ctx: ctx, budget: int(args.MaxEntries)}
	w.visit = func(rel string, st *unix.Stat_t, dirfd int, name string) error {
		hdr := &tar.Header{Name: rel, Mode: int64(st.Mode & 0o7777), ModTime: time.Unix(st.Mtim.Sec, 0)}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case unix.S_IFLNK:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, readlinkAt(dirfd, name)
		case unix.S_IFREG:
			hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		default:
			return nil // devices, fifos and sockets are not exported
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return exportErr(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0, resolveBeneath|unix.RESOLVE_NO_SYMLINKS)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), rel)
		defer func() { _ = f.Close() }()
		if _, err := io.CopyN(tw, f, st.Size); err != nil {
			if errors.Is(err, io.EOF) {
				return actuation.Refusef(actuation.CodeIOError, "%q shrank during export", rel)
			}
			return exportErr(err)
		}
		return nil
	}
	if err := w.walk(dfd, "", 0); err != nil {
		if errors.Is(err, errStopWalk) {
			return refused(actuation.Refusef(actuation.CodeTooLarge, "subtree has more than %d entries", args.MaxEntries))
		}
		return refused(err)
	}
	if err := tw.Close(); err != nil {
		return refused(exportErr(err))
	}
	return ok(protocol.ExportData{Entries: uint32(w.visited)}, buf.Bytes())
}

func exportErr(err error) error {
	if actuation.CodeOf(err) == actuation.CodeTransferTooLarge {
		return actuation.Refusef(actuation.CodeTooLarge, "export exceeds its byte budget")
	}
	if actuation.CodeOf(err) != "" {
		return err
	}
	return fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "export"), err)
}

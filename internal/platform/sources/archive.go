package sources

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Archive formats (spec.roots[].archive.format).
const (
	FormatTar     = "tar"
	FormatTarGzip = "tar+gzip"
	FormatZip     = "zip"
)

// entryKind is what an archive entry is, as the extractor sees it.
type entryKind int

const (
	kindFile entryKind = iota
	kindDir
	kindSymlink
	kindHardlink
	kindSpecial
)

// entry is one archive entry, format-neutral.
type entry struct {
	name     string
	kind     entryKind
	mode     fs.FileMode // permission bits plus setuid/setgid/sticky
	link     string      // symlink target or hardlink name
	what     string      // a description for kindSpecial
	contents io.Reader   // kindFile
}

// Extractor writes archive entries beneath one directory under the archive rules. One
// Extractor may take several archives (an OCI artifact's layers): the caps and the
// duplicate rule span all of them.
type Extractor struct {
	dst     *fsaccess.Root // writes refuse every symlink on the way (NoSymlinks view)
	lim     Limits
	seen    map[string]entryKind // explicit entries by clean name
	dirs    map[string]fs.FileMode
	entries int64
	bytes   int64
}

// NewExtractor returns an extractor writing beneath dst (an empty directory).
func NewExtractor(dst *fsaccess.Root, lim Limits) *Extractor {
	return &Extractor{dst: dst.NoSymlinks(), lim: lim.WithDefaults(), seen: map[string]entryKind{}, dirs: map[string]fs.FileMode{}}
}

// Entries and Bytes are what was written so far.
func (x *Extractor) Entries() int64 { return x.entries }

// Bytes is the regular-file bytes written so far.
func (x *Extractor) Bytes() int64 { return x.bytes }

// Finish applies the directories' archived permissions (they are created 0700 so that
// extraction can fill them) and syncs nothing: the caller publishes the directory.
func (x *Extractor) Finish() error {
	for d, perm := range x.dirs {
		if err := x.dst.Chmod(d, perm); err != nil {
			return fmt.Errorf("sources: chmod %q: %w", d, err)
		}
	}
	return nil
}

// cleanName checks and normalizes an entry name: "" means the archive's root directory
// entry ("./"), which is skipped.
func (x *Extractor) cleanName(raw string) (string, error) {
	name := raw
	if strings.HasPrefix(name, "/") {
		return "", errf(string(actuation.CodeArchivePathAbsolute), "entry %q: absolute path", raw)
	}
	if strings.ContainsRune(name, '\\') && !strings.ContainsRune(name, '/') && strings.Contains(name, "..") {
		return "", errf(string(actuation.CodeArchivePathTraversal), "entry %q: '..' behind a backslash", raw)
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", errf(string(actuation.CodeArchivePathTraversal), "entry %q: '..' component", raw)
		}
	}
	for strings.HasPrefix(name, "./") {
		name = name[2:]
	}
	name = strings.TrimSuffix(name, "/")
	if name == "" || name == "." {
		return "", nil
	}
	if err := fsaccess.CheckRel(name, true); err != nil {
		return "", wrapf(string(actuation.CodeArchivePathInvalid), err, "entry %q", raw)
	}
	if d := strings.Count(name, "/") + 1; d > x.lim.MaxDepth {
		return "", errf(string(actuation.CodeArchivePathInvalid), "entry %q: %d levels deep, at most %d", raw, d, x.lim.MaxDepth)
	}
	return name, nil
}

// linkInside reports whether a symlink at name with target stays inside the tree
// (lexically: an absolute target or one whose ".." climbs above the root does not).
func linkInside(name, target string) bool {
	if target == "" || strings.HasPrefix(target, "/") || strings.ContainsRune(target, 0) {
		return false
	}
	depth := strings.Count(name, "/") // the link's directory's depth
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return false
			}
		default:
			depth++
		}
	}
	return true
}

// writeErr classifies an fsaccess failure of a write: a link on the way is an escape, an
// existing name a duplicate.
func writeErr(name string, err error) error {
	switch {
	case actuation.CodeOf(err) == actuation.CodeSymlinkEscape || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV):
		return wrapf(string(actuation.CodeArchiveLinkEscape), err, "entry %q would be written through a link", name)
	case errors.Is(err, fs.ErrExist) || errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTDIR) || actuation.CodeOf(err) == actuation.CodeNotDirectory:
		return wrapf(string(actuation.CodeArchiveDuplicateEntry), err, "entry %q collides with an earlier entry", name)
	}
	return fmt.Errorf("sources: write %q: %w", name, err)
}

// add writes one entry.
func (x *Extractor) add(e entry) error {
	name, err := x.cleanName(e.name)
	if err != nil || name == "" {
		return err
	}
	if e.kind == kindSpecial {
		return errf(string(actuation.CodeArchiveSpecialFile), "entry %q is a %s", e.name, e.what)
	}
	if base := path.Base(name); strings.HasPrefix(base, ".wh.") {
		return errf(string(actuation.CodeArchiveSpecialFile), "entry %q is an OCI whiteout", e.name)
	}
	if e.mode&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
		return errf(string(actuation.CodeArchiveSetuid), "entry %q has the setuid or setgid bit (mode %v)", e.name, e.mode)
	}
	if prev, dup := x.seen[name]; dup {
		if !(prev == kindDir && e.kind == kindDir) {
			return errf(string(actuation.CodeArchiveDuplicateEntry), "entry %q appears twice", e.name)
		}
		return nil // the same directory declared twice (OCI layers do): harmless
	}
	x.entries++
	if x.entries > x.lim.MaxEntries {
		return errf(string(actuation.CodeArchiveTooManyEntries), "more than %d entries", x.lim.MaxEntries)
	}
	x.seen[name] = e.kind
	perm := e.mode.Perm() // sticky dropped: no privilege in a single-tenant copy
	if dir := path.Dir(name); dir != "." {
		if err := x.mkdirs(dir); err != nil {
			return err
		}
	}
	switch e.kind {
	case kindDir:
		if err := x.dst.Mkdir(name, 0o700); err != nil {
			return writeErr(e.name, err)
		}
		x.dirs[name] = perm | 0o700
	case kindSymlink:
		if !linkInside(name, e.link) {
			return errf(string(actuation.CodeArchiveLinkEscape), "symlink %q -> %q points outside the root", e.name, e.link)
		}
		if err := x.dst.Symlink(e.link, name); err != nil {
			return writeErr(e.name, err)
		}
	case kindHardlink:
		target, err := x.cleanName(e.link)
		if k, ok := x.seen[target]; err != nil || target == "" || target == name || !ok || k != kindFile {
			return errf(string(actuation.CodeArchiveLinkEscape), "hardlink %q -> %q names no earlier regular file of the archive", e.name, e.link)
		}
		if err := x.dst.Link(target, name); err != nil {
			return writeErr(e.name, err)
		}
	case kindFile:
		return x.writeFile(e.name, name, perm, e.contents)
	}
	return nil
}

// mkdirs creates the implicit parent directories of an entry (0700 until Finish, 0755
// when the archive declares none).
func (x *Extractor) mkdirs(dir string) error {
	if k, ok := x.seen[dir]; ok {
		if k == kindSymlink {
			return errf(string(actuation.CodeArchiveLinkEscape), "%q is a symlink entry: nothing is written through it", dir)
		}
		if k != kindDir {
			return errf(string(actuation.CodeArchiveDuplicateEntry), "%q is used as a directory after being a %s entry", dir, kindName(k))
		}
		return nil
	}
	if parent := path.Dir(dir); parent != "." {
		if err := x.mkdirs(parent); err != nil {
			return err
		}
	}
	x.entries++
	if x.entries > x.lim.MaxEntries {
		return errf(string(actuation.CodeArchiveTooManyEntries), "more than %d entries", x.lim.MaxEntries)
	}
	if err := x.dst.Mkdir(dir, 0o700); err != nil {
		return writeErr(dir, err)
	}
	x.seen[dir] = kindDir
	x.dirs[dir] = 0o755
	return nil
}

func kindName(k entryKind) string {
	switch k {
	case kindFile:
		return "file"
	case kindDir:
		return "directory"
	case kindSymlink:
		return "symlink"
	case kindHardlink:
		return "hardlink"
	}
	return "special"
}

func (x *Extractor) writeFile(raw, name string, perm fs.FileMode, r io.Reader) error {
	f, err := x.dst.CreateExclusive(name, 0o600)
	if err != nil {
		return writeErr(raw, err)
	}
	limit := min(x.lim.MaxFileBytes, x.lim.MaxBytes-x.bytes)
	n, err := io.Copy(f, io.LimitReader(r, limit))
	x.bytes += n
	over := false
	if err == nil && n == limit {
		var one [1]byte
		_, perr := io.ReadFull(r, one[:]) // one byte more than the cap: never written
		over = perr == nil
	}
	if err == nil && over {
		if limit == x.lim.MaxFileBytes {
			err = errf(string(actuation.CodeArchiveFileTooLarge), "entry %q is larger than %d bytes", raw, x.lim.MaxFileBytes)
		} else {
			err = errf(string(actuation.CodeArchiveTooLarge), "the archive extracts to more than %d bytes (at %q)", x.lim.MaxBytes, raw)
		}
	} else if err != nil && string(actuation.CodeOf(err)) == "" {
		err = wrapf(string(actuation.CodeArchiveInvalid), err, "entry %q", raw)
	}
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("sources: close %q: %w", raw, cerr)
	}
	return err
}

// ExtractTar extracts a tar stream (gzip when gzipped).
func (x *Extractor) ExtractTar(r io.Reader, gzipped bool) error {
	if gzipped {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return wrapf(string(actuation.CodeArchiveInvalid), err, "not a gzip stream")
		}
		defer func() { _ = zr.Close() }()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return wrapf(string(actuation.CodeArchiveInvalid), err, "tar")
		}
		if err := x.add(tarEntry(h, tr)); err != nil {
			return err
		}
	}
}

func tarEntry(h *tar.Header, r io.Reader) entry {
	e := entry{name: h.Name, mode: fs.FileMode(h.Mode & 0o777), link: h.Linkname}
	if h.Mode&04000 != 0 {
		e.mode |= fs.ModeSetuid
	}
	if h.Mode&02000 != 0 {
		e.mode |= fs.ModeSetgid
	}
	if h.Mode&01000 != 0 {
		e.mode |= fs.ModeSticky
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse: // the reader reports the old TypeRegA as TypeReg
		e.kind, e.contents = kindFile, r
	case tar.TypeDir:
		e.kind = kindDir
	case tar.TypeSymlink:
		e.kind = kindSymlink
	case tar.TypeLink:
		e.kind = kindHardlink
	case tar.TypeChar:
		e.kind, e.what = kindSpecial, "character device"
	case tar.TypeBlock:
		e.kind, e.what = kindSpecial, "block device"
	case tar.TypeFifo:
		e.kind, e.what = kindSpecial, "fifo"
	default:
		e.kind, e.what = kindSpecial, fmt.Sprintf("tar entry of type %q", h.Typeflag)
	}
	return e
}

// ExtractZip extracts a zip archive of size bytes.
func (x *Extractor) ExtractZip(ra io.ReaderAt, size int64) error {
	zr, err := zip.NewReader(ra, size)
	if err != nil {
		return wrapf(string(actuation.CodeArchiveInvalid), err, "zip")
	}
	if int64(len(zr.File)) > x.lim.MaxEntries {
		return errf(string(actuation.CodeArchiveTooManyEntries), "the zip lists %d entries, at most %d", len(zr.File), x.lim.MaxEntries)
	}
	for _, f := range zr.File {
		if err := x.zipEntry(f); err != nil {
			return err
		}
	}
	return nil
}

func (x *Extractor) zipEntry(f *zip.File) error {
	m := f.Mode()
	e := entry{name: f.Name, mode: m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)}
	switch {
	case m.IsDir() || strings.HasSuffix(f.Name, "/"):
		e.kind = kindDir
	case m&fs.ModeSymlink != 0:
		rc, err := f.Open()
		if err != nil {
			return wrapf(string(actuation.CodeArchiveInvalid), err, "zip entry %q", f.Name)
		}
		target, err := io.ReadAll(io.LimitReader(rc, 4097))
		_ = rc.Close()
		if err != nil || len(target) > 4096 {
			return errf(string(actuation.CodeArchiveInvalid), "zip symlink %q: unreadable or longer than 4096 bytes", f.Name)
		}
		e.kind, e.link = kindSymlink, string(target)
	case m.IsRegular():
		rc, err := f.Open()
		if err != nil {
			return wrapf(string(actuation.CodeArchiveInvalid), err, "zip entry %q", f.Name)
		}
		defer func() { _ = rc.Close() }()
		e.kind, e.contents = kindFile, rc
	default:
		e.kind, e.what = kindSpecial, "special file ("+m.Type().String()+")"
	}
	return x.add(e)
}

// Extract extracts the archive at r (a blob of size bytes) in format into dst under the
// archive rules and returns the entries and bytes written.
func Extract(r io.ReaderAt, size int64, format string, dst *fsaccess.Root, lim Limits) (Result, error) {
	x := NewExtractor(dst, lim)
	var err error
	switch format {
	case FormatTar:
		err = x.ExtractTar(io.NewSectionReader(r, 0, size), false)
	case FormatTarGzip:
		err = x.ExtractTar(io.NewSectionReader(r, 0, size), true)
	case FormatZip:
		err = x.ExtractZip(r, size)
	default:
		err = errf(string(actuation.CodeSourceInvalid), "archive format %q: tar, tar+gzip or zip", format)
	}
	if err == nil {
		err = x.Finish()
	}
	return Result{Entries: x.entries, Bytes: x.bytes}, err
}

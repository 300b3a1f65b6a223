package guestfs

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/fixture"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

var epoch = time.Unix(0, 0).UTC()

// Export writes the subtree rel ("" = the whole root) to w as the deterministic tar of
// fixture.ExportRoot: entries in the guest's sorted walk order, names relative to the
// root, times zeroed, uid/gid 0, perm bits only; a symlink refuses (fixture-symlink), the
// caps refuse fixture-too-large. The guest's archive is untrusted: it is received whole
// (at most protocol.MaxExportBytes), every header is validated (path, type, size, depth,
// count, total bytes, no duplicates) before the first byte is written, and the archive is
// re-encoded, never passed through. The guest leaves special files out of its archive, so
// they are skipped here rather than refused.
func (r *Root) Export(ctx context.Context, rel string, w io.Writer, lim fixture.Limits) (*fixture.ExportResult, error) {
	if err := fsaccess.CheckRel(rel, false); err != nil {
		return nil, err
	}
	if lim.MaxFiles <= 0 {
		lim.MaxFiles = fixture.DefaultMaxFiles
	}
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = fixture.DefaultMaxBytes
	}
	if lim.MaxDepth <= 0 {
		lim.MaxDepth = fixture.DefaultMaxDepth
	}
	var (
		archive []byte
		single  *fsaccess.Entry
		content []byte
	)
	err := r.with(ctx, func(ctx context.Context, k *channel) error {
		c, err := k.get(ctx)
		if err != nil {
			return err
		}
		maxEntries := uint32(min(lim.MaxFiles, protocol.MaxExportEntries))
		_, archive, err = c.Export(ctx, "", protocol.ExportArgs{Path: r.guestPath(rel), MaxBytes: protocol.MaxExportBytes, MaxEntries: maxEntries})
		switch code := guestclient.GuestCode(err); {
		case err == nil:
			return nil
		case code == actuation.CodeNotDirectory && rel != "":
			// A single file, reported alone as fsaccess's walk does.
			e, err := r.lstat(ctx, k, rel)
			if err != nil {
				return err
			}
			single = &e
			switch e.Type {
			case fsaccess.TypeSymlink:
				return actuation.Refusef(actuation.CodeFixtureSymlink, "%q contains symlink %q; export refused", r.display(""), rel)
			case fsaccess.TypeOther:
				return actuation.Refusef(actuation.CodeFixtureSpecialFile, "%q contains special file %q", r.display(""), rel)
			case fsaccess.TypeFile:
				if e.Size > lim.MaxBytes {
					return actuation.Refusef(actuation.CodeFixtureTooLarge, "export of %q/%q exceeds %d bytes", r.display(""), rel, lim.MaxBytes)
				}
				content, err = r.fetch(ctx, k, rel, e.Size)
				return err
			}
			return nil
		case code == actuation.CodeTooLarge:
			return actuation.Wrapf(actuation.CodeFixtureTooLarge, err, "export of %q/%q exceeds the guest's caps (%d entries, %d bytes)", r.display(""), rel, maxEntries, protocol.MaxExportBytes)
		}
		return r.mapErr("export", rel, err)
	})
	if err != nil {
		return nil, err
	}
	cw := &countingWriter{w: w, d: fsaccess.NewDigester()}
	tw := tar.NewWriter(cw)
	res := &fixture.ExportResult{}
	if single != nil {
		if single.Type == fsaccess.TypeFile {
			hdr := &tar.Header{Typeflag: tar.TypeReg, Name: rel, Size: int64(len(content)), Mode: int64(single.Mode.Perm()), ModTime: epoch, Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, fmt.Errorf("guestfs: export %s: %w", r.display(rel), err)
			}
			if _, err := tw.Write(content); err != nil {
				return nil, fmt.Errorf("guestfs: export %s: %w", r.display(rel), err)
			}
			res.Files, res.Bytes = 1, int64(len(content))
		}
	} else {
		entries, err := r.checkArchive(rel, archive, lim)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			hdr := &tar.Header{Name: join(rel, e.name), Mode: e.mode, ModTime: epoch, Format: tar.FormatPAX}
			if e.dir {
				hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
				res.Dirs++
			} else {
				hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(e.data))
				res.Files++
				res.Bytes += hdr.Size
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, fmt.Errorf("guestfs: export %s: %w", r.display(rel), err)
			}
			if _, err := tw.Write(e.data); err != nil {
				return nil, fmt.Errorf("guestfs: export %s: %w", r.display(rel), err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("guestfs: export %s: %w", r.display(rel), err)
	}
	res.StreamBytes, res.Digest = cw.n, cw.d.Digest()
	return res, nil
}

type archived struct {
	name string
	dir  bool
	mode int64
	data []byte
}

// checkArchive validates the guest's tar completely before anything is written.
func (r *Root) checkArchive(rel string, archive []byte, lim fixture.Limits) ([]archived, error) {
	violation := func(format string, args ...any) error {
		return unavailable(fmt.Errorf("guestfs: export %s: the guest's archive is malformed: %s", r.display(rel), fmt.Sprintf(format, args...)))
	}
	tooLarge := func(what string) error {
		return actuation.Refusef(actuation.CodeFixtureTooLarge, "export of %q/%q exceeds %s", r.display(""), rel, what)
	}
	tr := tar.NewReader(bytes.NewReader(archive))
	seen := map[string]bool{}
	var (
		out   []archived
		total int64
	)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, violation("%v", err)
		}
		name := hdr.Name
		isDir := hdr.Typeflag == tar.TypeDir
		if isDir {
			name = strings.TrimSuffix(name, "/")
		}
		if err := fsaccess.CheckRel(name, true); err != nil {
			return nil, violation("entry %q: %v", protocol.Truncate(hdr.Name), err)
		}
		if seen[name] {
			return nil, violation("entry %q appears twice", protocol.Truncate(name))
		}
		seen[name] = true
		if len(out) >= lim.MaxFiles {
			return nil, tooLarge(fmt.Sprintf("%d entries", lim.MaxFiles))
		}
		if strings.Count(name, "/")+1 > lim.MaxDepth {
			return nil, tooLarge(fmt.Sprintf("depth %d", lim.MaxDepth))
		}
		e := archived{name: name, dir: isDir, mode: hdr.Mode & 0o777}
		switch hdr.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			if hdr.Size < 0 {
				return nil, violation("entry %q has size %d", protocol.Truncate(name), hdr.Size)
			}
			if total += hdr.Size; total > lim.MaxBytes {
				return nil, tooLarge(fmt.Sprintf("%d bytes", lim.MaxBytes))
			}
			// Bounded by the total above and by the received archive (a size beyond it is a
			// read error).
			data, err := io.ReadAll(io.LimitReader(tr, hdr.Size))
			if err != nil || int64(len(data)) != hdr.Size {
				return nil, violation("entry %q: %d of %d bytes (%v)", protocol.Truncate(name), len(data), hdr.Size, err)
			}
			e.data = data
		case tar.TypeSymlink, tar.TypeLink:
			return nil, actuation.Refusef(actuation.CodeFixtureSymlink, "%q contains symlink %q; export refused", r.display(""), join(rel, name))
		default:
			return nil, actuation.Refusef(actuation.CodeFixtureSpecialFile, "%q contains special file %q", r.display(""), join(rel, name))
		}
		out = append(out, e)
	}
	return out, nil
}

// fetch reads the whole regular file rel of the given size through bounded reads.
func (r *Root) fetch(ctx context.Context, k *channel, rel string, size int64) ([]byte, error) {
	buf := make([]byte, 0, size)
	for {
		c, err := k.get(ctx)
		if err != nil {
			return nil, err
		}
		d, b, err := c.ReadFile(ctx, "", protocol.ReadArgs{Path: r.guestPath(rel), Offset: uint64(len(buf)), Max: chunkBytes})
		if err != nil {
			k.drop()
			return nil, r.mapErr("export", rel, err)
		}
		if d.Size != size || int64(len(buf)+len(b)) > size {
			return nil, fmt.Errorf("guestfs: export %s: file changed during export", r.display(rel))
		}
		buf = append(buf, b...)
		if d.EOF {
			return buf, nil
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("guestfs: export %s: file changed during export", r.display(rel))
		}
	}
}

type countingWriter struct {
	w io.Writer
	d *fsaccess.Digester
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	_, _ = c.d.Write(p[:n]) // a hash never fails
	c.n += int64(n)
	return n, err
}

package fsaccess

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// Read caps.
const (
	DefaultReadBytes   = 1 << 20  // used when maxBytes <= 0
	MaxReadBytesHard   = 8 << 20  // read-cap-above-max
	MaxReadDigestBytes = 64 << 20 // above this the full-file digest is omitted ("over-file-cap")
)

// ReadResult is one bounded window of a regular file plus facts about the whole
// file. Digest covers the full file (not the window) when Size <= MaxReadDigestBytes.
type ReadResult struct {
	Path          string `json:"path"`
	Offset        int64  `json:"offset"`
	Data          []byte `json:"-"`
	Size          int64  `json:"size"`
	Digest        string `json:"digest,omitempty"`
	DigestOmitted string `json:"digestOmitted,omitempty"`
	EOF           bool   `json:"eof"`
}

// Read returns up to maxBytes (default DefaultReadBytes, refused above
// MaxReadBytesHard) of the regular file rel starting at offset. A final symlink
// is followed only if the kernel resolves it beneath the root.
func (r *Root) Read(rel string, offset int64, maxBytes int) (*ReadResult, error) {
	maxBytes, err := CheckRead(r.display(rel), rel, offset, maxBytes)
	if err != nil {
		return nil, err
	}
	fd, err := r.open(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	f := r.fileFromFd(fd, rel)
	defer func() { _ = f.Close() }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fsaccess: fstat %s: %w", r.display(rel), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, actuation.Refusef(actuation.CodeNotRegularFile, "read %s: not a regular file", r.display(rel))
	}
	res := &ReadResult{Path: rel, Offset: offset, Size: st.Size}
	if offset < st.Size {
		n := st.Size - offset
		if n > int64(maxBytes) {
			n = int64(maxBytes)
		}
		buf := make([]byte, n)
		got, err := f.ReadAt(buf, offset)
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("fsaccess: read %s: %w", r.display(rel), err)
		}
		res.Data = buf[:got]
	}
	res.EOF = offset+int64(len(res.Data)) >= st.Size
	if st.Size > MaxReadDigestBytes {
		res.DigestOmitted = OmitOverFileCap
		return res, nil
	}
	d := NewDigester()
	if _, err := io.Copy(d, io.NewSectionReader(f, 0, st.Size)); err != nil {
		res.DigestOmitted = "unreadable"
		return res, nil
	}
	var after unix.Stat_t
	if err := unix.Fstat(fd, &after); err != nil || after.Size != st.Size || after.Mtim != st.Mtim {
		res.DigestOmitted = "changed-during-read"
		return res, nil
	}
	res.Digest = d.Digest()
	return res, nil
}

// ReadFile returns the whole content of the regular file rel, refusing above
// maxBytes (file-too-large). Unlike Read it never follows a final symlink
// (writers use it; a final symlink refuses as symlink-escape).
func (r *Root) ReadFile(rel string, maxBytes int64) ([]byte, Entry, error) {
	if err := CheckRel(rel, true); err != nil {
		return nil, Entry{}, err
	}
	fd, err := r.open(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, Entry{}, err
	}
	f := r.fileFromFd(fd, rel)
	defer func() { _ = f.Close() }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, Entry{}, fmt.Errorf("fsaccess: fstat %s: %w", r.display(rel), err)
	}
	e := statToEntry(rel, &st)
	if e.Type != TypeFile {
		return nil, e, actuation.Refusef(actuation.CodeNotRegularFile, "read %s: not a regular file", r.display(rel))
	}
	if st.Size > maxBytes {
		return nil, e, actuation.Refusef(actuation.CodeFileTooLarge, "read %s: %d bytes above cap %d", r.display(rel), st.Size, maxBytes)
	}
	var buf bytes.Buffer
	buf.Grow(int(st.Size))
	n, err := io.Copy(&buf, io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, e, fmt.Errorf("fsaccess: read %s: %w", r.display(rel), err)
	}
	if n > maxBytes {
		return nil, e, actuation.Refusef(actuation.CodeFileTooLarge, "read %s: grew above cap %d while reading", r.display(rel), maxBytes)
	}
	e.Size = n
	e.Digest = DigestBytes(buf.Bytes())
	return buf.Bytes(), e, nil
}

// OpenRead opens the regular file rel read-only without following a final
// symlink and returns it with its metadata.
func (r *Root) OpenRead(rel string) (*os.File, Entry, error) {
	if err := CheckRel(rel, true); err != nil {
		return nil, Entry{}, err
	}
	fd, err := r.open(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, Entry{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, Entry{}, fmt.Errorf("fsaccess: fstat %s: %w", r.display(rel), err)
	}
	e := statToEntry(rel, &st)
	if e.Type != TypeFile {
		unix.Close(fd)
		return nil, e, actuation.Refusef(actuation.CodeNotRegularFile, "open %s: not a regular file", r.display(rel))
	}
	return r.fileFromFd(fd, rel), e, nil
}

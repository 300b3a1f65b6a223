package loopdisk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Clone methods, as Clone reports them.
const (
	CloneReflink = "reflink" // FICLONE: the clone shares the base's extents (copy on write)
	CloneSparse  = "sparse"  // a copy of the base's data ranges only; its holes stay holes
)

// Clone makes id's disk image in the pool from base: a reflink (FICLONE) where the
// filesystem has it, else a sparse copy (SEEK_DATA/SEEK_HOLE: only the base's data is
// written), then sized to size bytes (at least the base's size: a clone never truncates
// its base). The image's full size is reserved: a clone that would take the pool's
// reservation past its capacity is refused with storage-exhausted, before anything is
// written. An existing image is kept as it is (created false). base must be a regular
// file open for reading; the image is 0600, owned by the caller.
func (p *Pool) Clone(id string, base *os.File, size int64) (created bool, method string, err error) {
	if err := validID(id); err != nil {
		return false, "", err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(base.Fd()), &st); err != nil {
		return false, "", fmt.Errorf("loopdisk: stat base: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, "", errors.New("loopdisk: the base of a clone is not a regular file")
	}
	size = max(size, st.Size)
	if size < MinBytes || size > MaxBytes {
		return false, "", fmt.Errorf("loopdisk: disk of %d bytes outside [%d MiB, %d MiB]", size, MinBytes>>20, MaxBytes>>20)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	img := p.Image(id)
	if _, err := os.Lstat(img); err == nil {
		return false, "", nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, "", fmt.Errorf("loopdisk: %w", err)
	}
	used, n, err := p.usage()
	if err != nil {
		return false, "", err
	}
	if used+size > p.capacity {
		return false, "", errExhausted("a disk of %d MiB does not fit the node's storage reservation: %d of %d MiB reserved by %d disk(s)",
			size>>20, used>>20, p.capacity>>20, n)
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return false, "", fmt.Errorf("loopdisk: %w", err)
	}
	tmp := filepath.Join(p.dir, "."+id+".clone")
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false, "", fmt.Errorf("loopdisk: %w", err)
	}
	ok := false
	defer func() {
		_ = f.Close()
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	method = CloneReflink
	if err := fileClone(f, base); err != nil {
		method = CloneSparse
		if err := sparseCopy(f, base, st.Size); err != nil {
			return false, "", fmt.Errorf("loopdisk: copy the base: %w", err)
		}
	}
	if err := f.Truncate(size); err != nil {
		return false, "", fmt.Errorf("loopdisk: %w", err)
	}
	if err := f.Sync(); err != nil {
		return false, "", fmt.Errorf("loopdisk: %w", err)
	}
	if err := os.Rename(tmp, img); err != nil {
		return false, "", fmt.Errorf("loopdisk: %w", err)
	}
	ok = true
	return true, method, nil
}

// sparseCopy copies the data ranges of src (size bytes) to the same offsets of dst.
func sparseCopy(dst, src *os.File, size int64) error {
	sfd := int(src.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only a hole remains
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(sfd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		hole = min(hole, size)
		if _, err := io.Copy(io.NewOffsetWriter(dst, data), io.NewSectionReader(src, data, hole-data)); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// Delete removes id's image (a missing one is no error).
func (p *Pool) Delete(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := os.Remove(p.Image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("loopdisk: %w", err)
	}
	return nil
}

package loopdisk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ImageSuffix ends every image's name: <dir>/<id>.img.
const ImageSuffix = ".img"

// MaxImages bounds the images a pool lists (its ledger); more refuse new disks.
const MaxImages = 10_000

// Pool is one directory of per-environment disk images under a node-wide reservation.
// It is safe for concurrent use.
type Pool struct {
	dir      string
	capacity int64
	*ledger
}

// ledger is the one node-wide reservation shared by a pool and its siblings: one lock
// and every directory whose images count against the capacity.
type ledger struct {
	mu   sync.Mutex
	dirs []string
}

// NewPool returns the pool of images in dir (created 0700 on first use) whose sizes may
// add up to capacity bytes.
func NewPool(dir string, capacity int64) *Pool {
	dir = filepath.Clean(dir)
	return &Pool{dir: dir, capacity: capacity, ledger: &ledger{dirs: []string{dir}}}
}

// Sibling returns a pool of images in dir under the same reservation as p: the images of
// both count against one capacity, under one lock (a disk made in either is refused when
// the sum would pass it). Each pool's Sweep touches only its own directory.
func (p *Pool) Sibling(dir string) *Pool {
	dir = filepath.Clean(dir)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(p.dirs, dir) {
		p.dirs = append(p.dirs, dir)
	}
	return &Pool{dir: dir, capacity: p.capacity, ledger: p.ledger}
}

// Dir is the image directory.
func (p *Pool) Dir() string { return p.dir }

// Capacity is the reservation in bytes.
func (p *Pool) Capacity() int64 { return p.capacity }

// Image is the image path of id.
func (p *Pool) Image(id string) string { return filepath.Join(p.dir, id+ImageSuffix) }

func validID(id string) error {
	if id == "" || len(id) > 200 || strings.ContainsAny(id, "/\x00") || strings.HasPrefix(id, ".") {
		return fmt.Errorf("loopdisk: invalid disk id %q", id)
	}
	return nil
}

// Usage is the reservation in use: the sizes of every image in the pool, and their count.
func (p *Pool) Usage() (used int64, disks int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.usage()
}

func (p *Pool) usage() (int64, int, error) {
	var used int64
	n := 0
	for _, dir := range p.dirs {
		u, k, err := dirUsage(dir)
		if err != nil {
			return 0, 0, err
		}
		used, n = used+u, n+k
	}
	return used, n, nil
}

// dirUsage sums the apparent sizes of the images in dir: a sparse or cloned image is
// reserved at its full virtual size (the most it can ever take).
func dirUsage(dir string) (int64, int, error) {
	ents, err := readDirBounded(dir, MaxImages+1)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("loopdisk: list %s: %w", dir, err)
	}
	if len(ents) > MaxImages {
		return 0, 0, fmt.Errorf("loopdisk: %s holds more than %d entries", dir, MaxImages)
	}
	var used int64
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ImageSuffix) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		used += fi.Size()
		n++
	}
	return used, n, nil
}

func readDirBounded(dir string, n int) ([]os.DirEntry, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	ents, err := f.ReadDir(n)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return ents, err
}

// Mounted reports whether dir is the mount point of id's image.
func (p *Pool) Mounted(id, dir string) (bool, error) {
	ms, err := MountsUnder(dir)
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m.Point != filepath.Clean(dir) {
			continue
		}
		if strings.TrimSuffix(BackingFile(m.Source), " (deleted)") == p.Image(id) {
			return true, nil
		}
		return false, fmt.Errorf("loopdisk: %s is a mount point of %s (%s), not of %s", dir, m.Source, m.FSType, p.Image(id))
	}
	return false, nil
}

// Ensure makes id's disk of size bytes mounted at dir (an existing directory): an image
// already mounted there is kept, an existing one is mounted, a missing one is made. A
// new disk that would take the pool past its capacity is refused (storage-exhausted).
// created says this call made the image.
func (p *Pool) Ensure(ctx context.Context, id string, size int64, dir string) (created bool, err error) {
	if err := validID(id); err != nil {
		return false, err
	}
	if size < MinBytes || size > MaxBytes {
		return false, fmt.Errorf("loopdisk: disk of %d bytes outside [%d MiB, %d MiB]", size, MinBytes>>20, MaxBytes>>20)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok, err := p.Mounted(id, dir); err != nil || ok {
		return false, err
	}
	img := p.Image(id)
	if _, err := os.Lstat(img); err == nil {
		return false, Mount(img, dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("loopdisk: %w", err)
	}
	used, n, err := p.usage()
	if err != nil {
		return false, err
	}
	if used+size > p.capacity {
		return false, errExhausted("a disk of %d MiB does not fit the node's storage reservation: %d of %d MiB reserved by %d disk(s)",
			size>>20, used>>20, p.capacity>>20, n)
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return false, fmt.Errorf("loopdisk: %w", err)
	}
	if err := Format(ctx, img, size); err != nil {
		return false, err
	}
	if err := Mount(img, dir); err != nil {
		_ = os.Remove(img)
		return false, err
	}
	return true, nil
}

// Release unmounts id's disk from dir (lazily when busy) and deletes its image; its loop
// device detaches when the last user of the filesystem goes. A missing disk is no error.
func (p *Pool) Release(id, dir string) error {
	if err := validID(id); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.release(id, dir)
}

func (p *Pool) release(id, dir string) error {
	var errs []error
	if ok, err := p.Mounted(id, dir); err != nil {
		errs = append(errs, err)
	} else if ok {
		if err := Unmount(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(p.Image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("loopdisk: %w", err))
	}
	return errors.Join(errs...)
}

// Action is one action of a sweep.
type Action struct {
	Resource string
	Removed  bool // false: it could not be removed (Message says why)
	Message  string
}

// Sweep is the recovery sweep: under mountRoot (where disks are mounted as
// <mountRoot>/<id>), every mount of a disk whose id keep refuses is unmounted, and every
// pool entry that is not the image of a kept id is deleted; loop devices still attached
// to a deleted image of the pool are detached. Disks of kept ids stay as they are.
func (p *Pool) Sweep(mountRoot string, keep func(id string) bool) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	var acts []Action
	add := func(res, msg string, err error) {
		if err != nil {
			acts = append(acts, Action{Resource: res, Message: fmt.Sprintf("%s: %v", msg, err)})
			return
		}
		acts = append(acts, Action{Resource: res, Removed: true, Message: msg})
	}
	mountRoot = filepath.Clean(mountRoot)
	ms, err := MountsUnder(mountRoot)
	if err != nil {
		add(mountRoot, "list mounts", err)
	}
	// Deepest first: a mount below a disk's mount goes before it.
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		rel, _ := filepath.Rel(mountRoot, m.Point)
		if rel == "." || strings.Contains(rel, "/") {
			continue // not a disk's mount point; not ours to touch
		}
		bf := strings.TrimSuffix(BackingFile(m.Source), " (deleted)")
		if !strings.HasPrefix(bf, p.dir+"/") {
			continue
		}
		if filepath.Base(bf) == rel+ImageSuffix && keep(rel) {
			continue
		}
		add(m.Point, "unmounted a disk of an environment not known to the store", Unmount(m.Point))
	}
	ents, err := readDirBounded(p.dir, MaxImages)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		add(p.dir, "list images", err)
	}
	for _, e := range ents {
		name := e.Name()
		if id, ok := strings.CutSuffix(name, ImageSuffix); ok && e.Type().IsRegular() && validID(id) == nil && keep(id) {
			continue
		}
		path := filepath.Join(p.dir, name)
		// Still mounted somewhere (not where a disk belongs): detach it lazily first.
		for _, m := range mountsOfImage(path) {
			_ = Unmount(m)
		}
		add(path, "deleted a disk image of an environment not known to the store", os.RemoveAll(path))
	}
	loops, err := LoopsBackedBy(p.dir)
	if err != nil {
		add(p.dir, "list loop devices", err)
	}
	for _, dev := range loops {
		bf := BackingFile(dev)
		if !strings.HasSuffix(bf, " (deleted)") {
			continue
		}
		if len(mountsOfDevice(dev)) > 0 {
			continue // a lazily detached mount still in use; autoclear ends it
		}
		add(dev, "detached a loop device of a deleted disk image", Detach(dev))
	}
	return acts
}

func mountsOfImage(image string) []string {
	ms, err := MountsUnder("/")
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range ms {
		if strings.TrimSuffix(BackingFile(m.Source), " (deleted)") == image {
			out = append(out, m.Point)
		}
	}
	return out
}

func mountsOfDevice(dev string) []string {
	ms, err := MountsUnder("/")
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range ms {
		if m.Source == dev {
			out = append(out, m.Point)
		}
	}
	return out
}

// Available is the free space, in bytes, of the filesystem holding dir (for a default
// reservation).
func Available(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("loopdisk: statfs %s: %w", dir, err)
	}
	return availBytes(&st), nil
}

// Move hands the disk of fromID, mounted at fromDir, to toID at toDir (which must not
// exist): the same filesystem is bind-mounted at toDir (one superblock, never a second
// mount of the image), the image is renamed to toID's, and fromDir is unmounted (lazily
// when busy) and removed. A disk that is not mounted at fromDir is not moved (the caller
// copies afresh).
func (p *Pool) Move(fromID, fromDir, toID, toDir string) error {
	for _, id := range []string{fromID, toID} {
		if err := validID(id); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ok, err := p.Mounted(fromID, fromDir)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("loopdisk: the disk of %s is not mounted at %s", fromID, fromDir)
	}
	if _, err := os.Lstat(p.Image(toID)); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("loopdisk: %s exists already (%v)", p.Image(toID), err)
	}
	if err := os.Mkdir(toDir, 0o700); err != nil {
		return fmt.Errorf("loopdisk: %w", err)
	}
	// A bind mount keeps the source mount's nosuid,nodev (they are locked on a clone).
	if err := bindMount(fromDir, toDir); err != nil {
		_ = os.Remove(toDir)
		return fmt.Errorf("loopdisk: bind %s at %s: %w", fromDir, toDir, err)
	}
	if err := remountBindSafe(toDir); err != nil {
		_ = Unmount(toDir)
		_ = os.Remove(toDir)
		return fmt.Errorf("loopdisk: remount %s nosuid,nodev: %w", toDir, err)
	}
	if err := os.Rename(p.Image(fromID), p.Image(toID)); err != nil {
		_ = Unmount(toDir)
		_ = os.Remove(toDir)
		return fmt.Errorf("loopdisk: %w", err)
	}
	if err := Unmount(fromDir); err != nil {
		return err
	}
	if err := os.Remove(fromDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("loopdisk: %w", err)
	}
	return nil
}

package qemumicrovm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// MaxBootFileBytes bounds a kernel or initrd (image-invalid above it).
const MaxBootFileBytes = 1 << 30

// MaxCommandLine bounds the kernel command line (the ImageManifest's own bound).
const MaxCommandLine = 1024

// fileKey is what must stay equal for a cached digest to be reused: the same inode with
// the same size, modification and change times.
type fileKey struct {
	dev, ino    uint64
	size        int64
	mtime, ctim unix.Timespec
}

// digestCache remembers verified digests per file identity, so a 60 MiB kernel is hashed
// once per change and not at every boot.
type digestCache struct {
	mu sync.Mutex
	m  map[fileKey]string
}

func (c *digestCache) get(k fileKey) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *digestCache) put(k fileKey, d string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) > 256 {
		c.m = map[fileKey]string{}
	}
	c.m[k] = d
}

// bootFiles are the opened, verified kernel and initrd. QEMU reads exactly these open
// files (passed as /dev/fd/3 and /dev/fd/4), not whatever a path names later.
type bootFiles struct {
	kernel, initrd *os.File
	disk           *os.File // the working disk (full-system variants), read-write
	diskRO         *os.File // the same file read-only (QEMU asks its fd set for both modes)
}

func (f *bootFiles) Close() {
	if f == nil {
		return
	}
	if f.kernel != nil {
		_ = f.kernel.Close()
	}
	if f.initrd != nil {
		_ = f.initrd.Close()
	}
	if f.disk != nil {
		_ = f.disk.Close()
	}
	if f.diskRO != nil {
		_ = f.diskRO.Close()
	}
}

// checkBootImage checks the form of a boot image description.
func checkBootImage(img *backends.BootImage) error {
	if img == nil {
		return actuation.Refusef(actuation.CodeImageInvalid, "%s needs a boot image (spec.imageRef naming an ImageManifest with a %s variant)", ID, ID)
	}
	for _, f := range []struct{ what, path, digest string }{{"kernel", img.KernelPath, img.KernelDigest}, {"initrd", img.InitrdPath, img.InitrdDigest}} {
		if f.path == "" {
			return actuation.Refusef(actuation.CodeImageInvalid, "the variant has no %s", f.what)
		}
		if err := fsaccess.CheckRel(f.path, true); err != nil {
			return actuation.Wrapf(actuation.CodeImageInvalid, err, "%s path %q", f.what, f.path)
		}
		if !protocol.ValidDigest(f.digest) {
			return actuation.Refusef(actuation.CodeImageInvalid, "%s digest %q is not sha256:<64 lowercase hex>", f.what, f.digest)
		}
	}
	if img.DiskPath != "" || img.DiskDigest != "" {
		if err := fsaccess.CheckRel(img.DiskPath, true); err != nil {
			return actuation.Wrapf(actuation.CodeImageInvalid, err, "disk path %q", img.DiskPath)
		}
		if !protocol.ValidDigest(img.DiskDigest) {
			return actuation.Refusef(actuation.CodeImageInvalid, "disk digest %q is not sha256:<64 lowercase hex>", img.DiskDigest)
		}
	}
	if len(img.CommandLine) > MaxCommandLine {
		return actuation.Refusef(actuation.CodeImageInvalid, "kernel command line longer than %d bytes", MaxCommandLine)
	}
	for i := 0; i < len(img.CommandLine); i++ {
		if c := img.CommandLine[i]; c < ' ' || c > '~' {
			return actuation.Refusef(actuation.CodeImageInvalid, "kernel command line has a non-printable byte at %d", i)
		}
	}
	return nil
}

// openBoot opens the kernel and initrd beneath the image directory (openat2
// RESOLVE_BENEATH: no .., no absolute or escaping symlinks) and verifies their digests
// unless verify is false (the accelerator probe only tests the VMM).
func (b *Backend) openBoot(img *backends.BootImage, verify bool) (*bootFiles, error) {
	root, err := fsaccess.OpenRoot(b.cfg.ImageDir)
	if err != nil {
		return nil, actuation.Wrapf(actuation.CodeImageInvalid, err, "image directory %q", b.cfg.ImageDir)
	}
	defer func() { _ = root.Close() }()
	bf := &bootFiles{}
	open := func(what, rel, digest string) (*os.File, error) {
		f, e, err := root.OpenRead(rel)
		if err != nil {
			return nil, actuation.Wrapf(actuation.CodeImageInvalid, err, "%s %q beneath %s", what, rel, b.cfg.ImageDir)
		}
		if e.Size > MaxBootFileBytes {
			_ = f.Close()
			return nil, actuation.Refusef(actuation.CodeImageInvalid, "%s %q is %d bytes, at most %d", what, rel, e.Size, MaxBootFileBytes)
		}
		if !verify {
			return f, nil
		}
		if err := b.verify(f, digest); err != nil {
			_ = f.Close()
			return nil, actuation.Wrapf(actuation.CodeDigestMismatch, err, "%s %q", what, rel)
		}
		return f, nil
	}
	if bf.kernel, err = open("kernel", img.KernelPath, img.KernelDigest); err != nil {
		return nil, err
	}
	if bf.initrd, err = open("initrd", img.InitrdPath, img.InitrdDigest); err != nil {
		bf.Close()
		return nil, err
	}
	return bf, nil
}

// verify hashes f (through the open file, from offset 0) unless the same file identity was
// verified before, and compares with want.
func (b *Backend) verify(f *os.File, want string) error {
	return b.verifyN(f, want, MaxBootFileBytes)
}

// verifyN is verify for a file of at most limit bytes.
func (b *Backend) verifyN(f *os.File, want string, limit int64) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	k := fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctim: st.Ctim}
	got := b.digests.get(k)
	if got == "" {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, limit+1)); err != nil {
			return fmt.Errorf("hash: %w", err)
		}
		got = protocol.DigestPrefix + hex.EncodeToString(h.Sum(nil))
		b.digests.put(k, got)
	}
	if got != want {
		return fmt.Errorf("content is %s, the image manifest pins %s", got, want)
	}
	return nil
}

// imageDigest is the digest the handshake binds as the image: the boot variant's kernel
// and initrd digests and command line (what this boot actually runs).
func imageDigest(img *backends.BootImage) string {
	h := sha256.New()
	h.Write([]byte("qemu-microvm.v1.boot\x00"))
	h.Write([]byte(img.KernelDigest + "\x00" + img.InitrdDigest + "\x00" + img.CommandLine))
	if img.DiskDigest != "" {
		h.Write([]byte("\x00disk\x00" + img.DiskDigest))
	}
	return protocol.DigestPrefix + hex.EncodeToString(h.Sum(nil))
}

// Package artifacts is the node-local content-addressed blob store behind the
// Artifact kind: blobs live at <dir>/sha256/<aa>/<hex>, are written through a
// temp file + fsync + rename, verified on every read (a corrupted blob is
// reported, never served) and garbage-collected against retention times.
// All file access goes through fsaccess (openat2 beneath the store dir).
package artifacts

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Caps and timings.
const (
	MaxBytesHard = 4 << 30          // artifact-too-large: no single blob above 4 GiB
	GCMinAge     = 10 * time.Minute // unreferenced blobs/temps younger than this survive GC (in-flight Put)
	MaxGCEntries = 200_000          // GC visits at most this many entries per call (Truncated)
)

const (
	blobDir = "sha256"
	tmpDir  = "tmp"
)

// Store is one blob directory.
type Store struct {
	dir  string
	root *fsaccess.Root
}

// Open opens (creating if needed) the store at dir.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil { // operator-configured state path
		return nil, fmt.Errorf("artifacts: create %q: %w", dir, err)
	}
	root, err := fsaccess.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("artifacts: open %q: %w", dir, err)
	}
	for _, d := range []string{blobDir, tmpDir} {
		if _, err := root.MkdirAll(d, 0o700); err != nil {
			_ = root.Close()
			return nil, fmt.Errorf("artifacts: create %q/%s: %w", dir, d, err)
		}
	}
	return &Store{dir: dir, root: root}, nil
}

// Close releases the store's directory fd.
func (s *Store) Close() error { return s.root.Close() }

func blobPath(hexd string) string { return blobDir + "/" + hexd[:2] + "/" + hexd }

// Put stores r's content (at most maxBytes) and returns its digest and size.
// Identical content is stored once.
func (s *Store) Put(r io.Reader, maxBytes int64) (string, int64, error) {
	return s.PutExpect(r, maxBytes, "", -1)
}

// PutExpect is Put that also refuses when the content's digest differs from
// wantDigest (if non-empty) or its size from wantSize (if >= 0). Nothing is
// stored on refusal.
func (s *Store) PutExpect(r io.Reader, maxBytes int64, wantDigest string, wantSize int64) (string, int64, error) {
	if maxBytes <= 0 {
		return "", 0, actuation.Refusef(actuation.CodeInvalidArgument, "artifact cap %d must be positive", maxBytes)
	}
	if maxBytes > MaxBytesHard {
		return "", 0, actuation.Refusef(actuation.CodeArtifactTooLarge, "artifact cap %d above hard max %d", maxBytes, MaxBytesHard)
	}
	if wantDigest != "" {
		if _, err := fsaccess.ParseDigest(wantDigest); err != nil {
			return "", 0, err
		}
	}
	if wantSize > maxBytes {
		return "", 0, actuation.Refusef(actuation.CodeArtifactTooLarge, "declared size %d above cap %d", wantSize, maxBytes)
	}
	tmp, f, err := s.createTemp()
	if err != nil {
		return "", 0, err
	}
	committed := false
	defer func() {
		if !committed {
			_ = f.Close()
			_ = s.root.Remove(tmp)
		}
	}()
	d := fsaccess.NewDigester()
	n, err := io.Copy(io.MultiWriter(f, d), io.LimitReader(r, maxBytes+1))
	if err != nil {
		return "", 0, fmt.Errorf("artifacts: write %s/%s: %w", s.dir, tmp, err)
	}
	if n > maxBytes {
		return "", 0, actuation.Refusef(actuation.CodeArtifactTooLarge, "artifact above %d bytes", maxBytes)
	}
	digest := d.Digest()
	if wantSize >= 0 && n != wantSize {
		return "", 0, actuation.Refusef(actuation.CodeSizeMismatch, "artifact is %d bytes, declared %d", n, wantSize)
	}
	if wantDigest != "" && digest != wantDigest {
		return "", 0, actuation.Refusef(actuation.CodeDigestMismatch, "artifact digest %s, declared %s", digest, wantDigest)
	}
	if err := f.Sync(); err != nil {
		return "", 0, fmt.Errorf("artifacts: fsync %s/%s: %w", s.dir, tmp, err)
	}
	if err := f.Close(); err != nil {
		return "", 0, fmt.Errorf("artifacts: close %s/%s: %w", s.dir, tmp, err)
	}
	committed = true
	hexd := digest[len(fsaccess.DigestPrefix):]
	final := blobPath(hexd)
	if _, err := s.root.MkdirAll(blobDir+"/"+hexd[:2], 0o700); err != nil {
		_ = s.root.Remove(tmp)
		return "", 0, fmt.Errorf("artifacts: %w", err)
	}
	err = s.root.RenameNoReplace(tmp, final)
	if errors.Is(err, fs.ErrExist) {
		// Deduplicate, but repair a corrupted existing copy with the fresh bytes.
		if verr := s.Verify(digest); actuation.CodeOf(verr) == actuation.CodeArtifactCorrupt {
			err = s.root.Rename(tmp, final)
		} else {
			err = s.root.Remove(tmp)
		}
	}
	if err != nil {
		_ = s.root.Remove(tmp)
		return "", 0, fmt.Errorf("artifacts: store %s: %w", digest, err)
	}
	if err := s.root.SyncDir(blobDir + "/" + hexd[:2]); err != nil {
		return "", 0, fmt.Errorf("artifacts: %w", err)
	}
	return digest, n, nil
}

func (s *Store) createTemp() (string, *os.File, error) {
	var err error
	for i := 0; i < 8; i++ {
		name := tmpDir + "/" + fsaccess.RandomName("put-")
		var f *os.File
		if f, err = s.root.CreateExclusive(name, 0o444); err == nil {
			return name, f, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	return "", nil, fmt.Errorf("artifacts: create temp in %s: %w", s.dir, err)
}

// Info is a blob's metadata.
type Info struct {
	Digest  string    `json:"digest"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
}

func (s *Store) lookup(digest string) (string, error) {
	hexd, err := fsaccess.ParseDigest(digest)
	if err != nil {
		return "", err
	}
	return blobPath(hexd), nil
}

func notFound(digest string, err error) error {
	if actuation.CodeOf(err) == actuation.CodePathNotFound {
		return actuation.Wrapf(actuation.CodeArtifactNotFound, err, "artifact %s", digest)
	}
	return fmt.Errorf("artifacts: %s: %w", digest, err)
}

// Stat returns a blob's metadata without reading or verifying it.
func (s *Store) Stat(digest string) (Info, error) {
	p, err := s.lookup(digest)
	if err != nil {
		return Info{}, err
	}
	e, err := s.root.Lstat(p)
	if err != nil {
		return Info{}, notFound(digest, err)
	}
	if e.Type != fsaccess.TypeFile {
		return Info{}, actuation.Refusef(actuation.CodeArtifactCorrupt, "artifact %s is a %s", digest, e.Type)
	}
	return Info{Digest: digest, Size: e.Size, ModTime: e.ModTime}, nil
}

// Blob is a verified, open blob positioned at offset 0.
type Blob struct {
	*os.File
	Digest string
	Size   int64
}

// Open returns the blob after hashing it completely: a blob whose bytes no
// longer match its digest is reported as artifact-corrupt and not returned.
func (s *Store) Open(digest string) (*Blob, error) {
	p, err := s.lookup(digest)
	if err != nil {
		return nil, err
	}
	f, e, err := s.root.OpenRead(p)
	if err != nil {
		if actuation.CodeOf(err) == actuation.CodeNotRegularFile {
			return nil, actuation.Wrapf(actuation.CodeArtifactCorrupt, err, "artifact %s", digest)
		}
		return nil, notFound(digest, err)
	}
	got, n, err := fsaccess.DigestReader(io.LimitReader(f, MaxBytesHard+1))
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("artifacts: read %s: %w", digest, err)
	}
	if got != digest || n != e.Size {
		_ = f.Close()
		return nil, actuation.Refusef(actuation.CodeArtifactCorrupt, "artifact %s: stored bytes hash to %s (%d bytes)", digest, got, n)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("artifacts: seek %s: %w", digest, err)
	}
	return &Blob{File: f, Digest: digest, Size: n}, nil
}

// Verify re-hashes a stored blob.
func (s *Store) Verify(digest string) error {
	b, err := s.Open(digest)
	if err != nil {
		return err
	}
	return b.Close()
}

// Delete removes a blob; a missing blob is not an error.
func (s *Store) Delete(digest string) error {
	p, err := s.lookup(digest)
	if err != nil {
		return err
	}
	if err := s.root.Remove(p); err != nil && actuation.CodeOf(err) != actuation.CodePathNotFound {
		return fmt.Errorf("artifacts: delete %s: %w", digest, err)
	}
	return nil
}

// GCResult reports one collection.
type GCResult struct {
	Deleted     []string `json:"deleted"`
	Kept        int      `json:"kept"`
	TempRemoved int      `json:"tempRemoved"`
	Strays      []string `json:"strays,omitempty"` // unexpected names removed from the blob tree
	Truncated   bool     `json:"truncated"`
}

// GC deletes every blob whose retention has passed (retainedUntil[digest] <=
// now) or that is not in retainedUntil at all, except blobs younger than
// GCMinAge (a Put whose Artifact object is not recorded yet). Temp files older
// than GCMinAge are removed too. At most MaxGCEntries entries are visited.
func (s *Store) GC(retainedUntil map[string]time.Time, now time.Time) (*GCResult, error) {
	res := &GCResult{}
	young := func(e fsaccess.Entry) bool { return now.Sub(e.ModTime) < GCMinAge }
	wr, err := s.root.Walk(blobDir, fsaccess.WalkLimits{MaxEntries: MaxGCEntries, MaxDepth: 2}, func(w *fsaccess.WalkEntry) error {
		if w.Depth == 1 {
			if w.Type == fsaccess.TypeDir && len(w.Path) == len(blobDir)+3 && isHex(w.Path[len(blobDir)+1:]) {
				return nil // fan-out directory
			}
			if !young(w.Entry) {
				if err := s.root.RemoveAll(w.Path); err != nil {
					return err
				}
				res.Strays = append(res.Strays, w.Path)
			}
			if w.Type == fsaccess.TypeDir {
				return fs.SkipDir
			}
			return nil
		}
		_, name, _ := strings.Cut(w.Path[len(blobDir)+1:], "/")
		digest := fsaccess.DigestPrefix + name
		_, perr := fsaccess.ParseDigest(digest)
		valid := w.Type == fsaccess.TypeFile && perr == nil && strings.HasPrefix(w.Path, blobDir+"/"+name[:min(2, len(name))]+"/")
		if !valid {
			if !young(w.Entry) {
				if err := s.root.RemoveAll(w.Path); err != nil {
					return err
				}
				res.Strays = append(res.Strays, w.Path)
			}
			return nil
		}
		if until, ok := retainedUntil[digest]; (ok && until.After(now)) || young(w.Entry) {
			res.Kept++
			return nil
		}
		if err := s.root.Remove(w.Path); err != nil {
			return err
		}
		res.Deleted = append(res.Deleted, digest)
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("artifacts: gc %s: %w", s.dir, err)
	}
	res.Truncated = wr.Truncated
	tr, err := s.root.Walk(tmpDir, fsaccess.WalkLimits{MaxEntries: MaxGCEntries, MaxDepth: 1}, func(w *fsaccess.WalkEntry) error {
		if young(w.Entry) {
			return nil
		}
		if err := s.root.RemoveAll(w.Path); err != nil {
			return err
		}
		res.TempRemoved++
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("artifacts: gc %s/%s: %w", s.dir, tmpDir, err)
	}
	res.Truncated = res.Truncated || tr.Truncated
	return res, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

const tmpPrefix = ".tmp-"

// stageStore keeps staged patch content under <state>/stages/<hex of ref>, at most
// MaxStages files and MaxStageBytes in total (counting uploads in flight). A stage is
// written to a temporary file and published by rename only after the whole transfer was
// received and its digest checked: a partial transfer publishes nothing.
type stageStore struct {
	dir string

	mu       sync.Mutex
	sizes    map[string]uint64 // ref -> bytes
	bytes    uint64
	inflight map[string]uint64 // ref -> reserved bytes
	reserved uint64
	// epoch advances at every rebind (dropAll): an upload reserved before it never publishes.
	epoch      uint64
	inflightAt map[string]uint64 // ref -> epoch of the reservation
}

func openStageStore(state string) (*stageStore, error) {
	dir := filepath.Join(state, "stages")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("guest agent: stage dir: %w", err)
	}
	s := &stageStore{dir: dir, sizes: map[string]uint64{}, inflight: map[string]uint64{}, inflightAt: map[string]uint64{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("guest agent: stage dir: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		ref := protocol.DigestPrefix + name
		info, err := e.Info()
		if strings.HasPrefix(name, tmpPrefix) || err != nil || !info.Mode().IsRegular() || !protocol.ValidDigest(ref) || len(s.sizes) >= protocol.MaxStages {
			// Leftovers of an interrupted agent: never published, so removed (best effort:
			// one that stays is not counted, and the next start tries again).
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		s.sizes[ref] = uint64(info.Size())
		s.bytes += uint64(info.Size())
	}
	return s, nil
}

func (s *stageStore) path(ref string) string {
	return filepath.Join(s.dir, strings.TrimPrefix(ref, protocol.DigestPrefix))
}

func (s *stageStore) currentEpoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

func (s *stageStore) usage() (uint32, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint32(len(s.sizes)), s.bytes
}

// reserve admits an upload of n bytes for ref: exists reports an exact replay.
func (s *stageStore) reserve(ref string, n uint64) (exists bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sizes[ref]; ok {
		return true, nil
	}
	if _, ok := s.inflight[ref]; ok {
		return false, actuation.Refusef(actuation.CodeStageInFlight, "the same stage is being uploaded on another connection")
	}
	if len(s.sizes)+len(s.inflight) >= protocol.MaxStages {
		return false, actuation.Refusef(actuation.CodeStageCapReached, "at most %d stages are retained", protocol.MaxStages)
	}
	if s.bytes+s.reserved+n > protocol.MaxStageBytes {
		return false, actuation.Refusef(actuation.CodeStageCapReached, "stages would hold %d bytes, at most %d", s.bytes+s.reserved+n, protocol.MaxStageBytes)
	}
	s.inflight[ref] = n
	s.inflightAt[ref] = s.epoch
	s.reserved += n
	return false, nil
}

func (s *stageStore) release(ref string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(ref)
}

func (s *stageStore) releaseLocked(ref string) {
	s.reserved -= s.inflight[ref]
	delete(s.inflight, ref)
	delete(s.inflightAt, ref)
}

// dropAll removes every published stage and voids every upload in flight (it will not
// publish): a rebind leaves nothing of the previous owner's staged content. It returns
// how many published stages it removed.
func (s *stageStore) dropAll() (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch++
	for ref := range s.inflight {
		s.releaseLocked(ref)
	}
	var n uint32
	var firstErr error
	for ref, size := range s.sizes {
		if err := os.Remove(s.path(ref)); err != nil && !errors.Is(err, os.ErrNotExist) && firstErr == nil {
			firstErr = err
			continue
		}
		delete(s.sizes, ref)
		s.bytes -= size
		n++
	}
	return n, firstErr
}

// publish renames the received temp file into place and records the stage, under the
// store lock, so a replay sees either the upload in flight or the published stage.
func (s *stageStore) publish(ref, tmp string, n uint64, epoch uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at, ok := s.inflightAt[ref]; !ok || at != epoch || epoch != s.epoch {
		return actuation.Refusef(actuation.CodeNonceMismatch, "the guest was re-bound during the upload; the stage is dropped")
	}
	if err := os.Rename(tmp, s.path(ref)); err != nil {
		return err
	}
	s.releaseLocked(ref)
	s.sizes[ref] = n
	s.bytes += n
	return nil
}

// patchStage receives the upload and publishes it atomically. Framing violations of the
// upload (truncation, digest mismatch, deadline) close the connection and publish nothing;
// a refusal of a well-formed upload (caps) drains the declared chunks first so the
// channel stays in step.
func (a *Agent) patchStage(ctx context.Context, cn *conn, f protocol.Frame, req *protocol.Request) (reply, error) {
	var args protocol.StageArgs
	if err := decodeArgs(req, &args); err != nil {
		return reply{}, err
	}
	if err := protocol.CheckTransfer(args.Content, f.Count, protocol.MaxStageBytes); err != nil {
		return reply{}, closeWith(err)
	}
	deadline, _ := ctx.Deadline()
	// The upload must arrive within the request's deadline; it is never extended.
	_ = cn.c.SetReadDeadline(deadline)
	next := func() (protocol.Frame, error) {
		fr, err := protocol.ReadFrame(cn.c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fr, fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeDeadlineExceeded, "upload did not complete within the request deadline"), err)
		}
		return fr, err
	}
	receive := func(sink io.Writer) error {
		err := protocol.ReadTransfer(next, f.Seq, args.Content, f.Count, protocol.MaxStageBytes, sink)
		if err != nil && actuation.CodeOf(err) == actuation.CodeTransferIncomplete && errors.Is(err, &actuation.Refusal{Code: actuation.CodeDeadlineExceeded}) {
			return actuation.Refusef(actuation.CodeDeadlineExceeded, "upload did not complete within the request deadline")
		}
		return err
	}
	drainRefuse := func(err error) (reply, error) {
		if rerr := receive(io.Discard); rerr != nil {
			return reply{}, closeWith(rerr)
		}
		return refused(err), nil
	}
	if err := args.Validate(); err != nil {
		return drainRefuse(err)
	}
	if a.stopping.Load() {
		return drainRefuse(actuation.Refusef(actuation.CodeShuttingDown, "agent is shutting down"))
	}
	ref := protocol.StageRef(args.Target, args.Content.Bytes, args.Content.Digest)
	epoch := a.stages.currentEpoch()
	exists, err := a.stages.reserve(ref, args.Content.Bytes)
	if err != nil {
		return drainRefuse(err)
	}
	if exists {
		// Exact replay (e.g. after a lost receipt): the content is verified again and the
		// same ref returned; nothing is rewritten.
		if err := receive(io.Discard); err != nil {
			return reply{}, closeWith(err)
		}
		n, b := a.stages.usage()
		return ok(protocol.StageData{Ref: ref, Replayed: true, Stages: n, StageBytes: b}, nil), nil
	}
	tmp, err := os.CreateTemp(a.stages.dir, tmpPrefix)
	if err != nil {
		a.stages.release(ref)
		return drainRefuse(fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "stage temp file"), err))
	}
	published := false
	defer func() {
		if !published {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name()) // a leftover is removed at the next start (newStages)
			a.stages.release(ref)
		}
	}()
	if err := receive(tmp); err != nil {
		if actuation.CodeOf(err) == "" {
			// A local write failure: the stream is still in step only if every chunk was
			// consumed, which we cannot know here; close.
			err = fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "stage write"), err)
		}
		return reply{}, closeWith(err)
	}
	_ = cn.c.SetReadDeadline(time.Time{})
	if err := tmp.Sync(); err != nil {
		return refused(fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "stage sync"), err)), nil
	}
	if err := tmp.Close(); err != nil {
		return refused(fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "stage close"), err)), nil
	}
	if err := a.stages.publish(ref, tmp.Name(), args.Content.Bytes, epoch); err != nil {
		if actuation.CodeOf(err) != "" {
			return refused(err), nil
		}
		return refused(fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "stage publish"), err)), nil
	}
	published = true
	n, b := a.stages.usage()
	data := protocol.StageData{Ref: ref, Stages: n, StageBytes: b}
	if err := syncDir(a.stages.dir); err != nil {
		// Published, but its durability cannot be proved.
		return unknown(string(actuation.CodeIOError), err, data), nil
	}
	return ok(data, nil), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

// patchApply atomically replaces Target (beneath the root) with the staged content if
// Target's current content matches Base. The stage's ref is re-derived from the staged
// bytes, so a ref for another target or a damaged stage is refused.
func (a *Agent) patchApply(args *protocol.ApplyArgs) reply {
	a.stages.mu.Lock()
	_, have := a.stages.sizes[args.Ref]
	a.stages.mu.Unlock()
	if !have {
		return refused(actuation.Refusef(actuation.CodeStageUnknown, "no stage %s", args.Ref))
	}
	content, err := os.ReadFile(a.stages.path(args.Ref))
	if err != nil {
		return refused(fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeStageUnknown, "stage unreadable"), err))
	}
	if protocol.StageRef(args.Target, uint64(len(content)), protocol.DigestOf(content)) != args.Ref {
		return refused(actuation.Refusef(actuation.CodeStageUnknown, "stage %s does not bind target %q (or was damaged)", args.Ref, args.Target))
	}
	dir, base := filepath.Split(args.Target)
	// O_RDONLY (not O_PATH) so the directory can be fsynced after the rename.
	pfd, err := openat2(a.rootFd, strings.TrimSuffix(dir, "/"), unix.O_RDONLY|unix.O_DIRECTORY, 0, resolveBeneath)
	if err != nil && args.Base == protocol.BaseAbsent && actuation.CodeOf(err) == actuation.CodeNotFound {
		// A create in a directory that does not exist yet: its missing parents are made
		// (beneath the root, one component at a time, never through a link), as the host
		// backends do for a created file.
		if err = a.mkdirParents(strings.TrimSuffix(dir, "/")); err == nil {
			pfd, err = openat2(a.rootFd, strings.TrimSuffix(dir, "/"), unix.O_RDONLY|unix.O_DIRECTORY, 0, resolveBeneath)
		}
	}
	if err != nil {
		return refused(err)
	}
	defer unix.Close(pfd)
	mode := uint32(0o644)
	var st unix.Stat_t
	switch err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		if args.Base == protocol.BaseAbsent {
			return refused(actuation.Refusef(actuation.CodeBaseMismatch, "%q exists; base says absent", args.Target))
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return refused(actuation.Refusef(actuation.CodeNotRegularFile, "%q is not a regular file", args.Target))
		}
		if d := hashAt(pfd, base, st.Size, protocol.MaxTransfer); d != args.Base {
			return refused(actuation.Refusef(actuation.CodeBaseMismatch, "%q does not have the base content", args.Target))
		}
		mode = st.Mode & 0o7777
	case errors.Is(err, unix.ENOENT):
		if args.Base != protocol.BaseAbsent {
			return refused(actuation.Refusef(actuation.CodeBaseMismatch, "%q does not exist", args.Target))
		}
	default:
		return refused(mapErr(err, args.Target))
	}
	tmpName := tmpPrefix + randomHex(8)
	tfd, err := unix.Openat(pfd, tmpName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, mode)
	if err != nil {
		return refused(mapErr(err, args.Target))
	}
	tf := os.NewFile(uintptr(tfd), tmpName)
	cleanup := func() { _ = tf.Close(); _ = unix.Unlinkat(pfd, tmpName, 0) } // the write already failed
	if _, err := io.Copy(tf, bytes.NewReader(content)); err != nil {
		cleanup()
		return refused(fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "write"), err))
	}
	if err := unix.Fchmod(tfd, mode); err != nil {
		cleanup()
		return refused(fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "chmod"), err))
	}
	if err := tf.Sync(); err != nil {
		cleanup()
		return refused(fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "sync"), err))
	}
	if err := tf.Close(); err != nil {
		_ = unix.Unlinkat(pfd, tmpName, 0)
		return refused(fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "close"), err))
	}
	flags := uint(0)
	if args.Base == protocol.BaseAbsent {
		flags = unix.RENAME_NOREPLACE // atomic "create only if absent"
	} else if d := hashAt(pfd, base, st.Size, protocol.MaxTransfer); d != args.Base {
		// Re-checked right before the rename to narrow the window a concurrent writer has.
		_ = unix.Unlinkat(pfd, tmpName, 0)
		return refused(actuation.Refusef(actuation.CodeBaseMismatch, "%q changed before apply", args.Target))
	}
	if err := unix.Renameat2(pfd, tmpName, pfd, base, flags); err != nil {
		_ = unix.Unlinkat(pfd, tmpName, 0)
		if errors.Is(err, unix.EEXIST) {
			return refused(actuation.Refusef(actuation.CodeBaseMismatch, "%q appeared before apply", args.Target))
		}
		return refused(mapErr(err, args.Target))
	}
	sum := sha256.Sum256(content)
	data := protocol.ApplyData{Digest: protocol.DigestPrefix + hex.EncodeToString(sum[:]), Bytes: uint64(len(content))}
	if err := unix.Fsync(pfd); err != nil {
		// The rename happened; its durability cannot be proved.
		return unknown(string(actuation.CodeIOError), err, data)
	}
	return ok(data, nil)
}

// mkdirParents makes every missing directory of rel (a clean relative path beneath the
// root), 0755, component by component: each existing component is opened beneath the
// root without following any link, and each missing one is made inside its opened parent.
func (a *Agent) mkdirParents(rel string) error {
	fd, err := unix.Dup(a.rootFd)
	if err != nil {
		return mapErr(err, rel)
	}
	defer func() { unix.Close(fd) }()
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." {
			return actuation.Refusef(actuation.CodeSymlinkEscape, "%q: component %q", rel, c)
		}
		if err := unix.Mkdirat(fd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return mapErr(err, rel)
		}
		next, err := openat2(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveBeneath|unix.RESOLVE_NO_SYMLINKS)
		if err != nil {
			return err
		}
		unix.Close(fd)
		fd = next
	}
	return nil
}

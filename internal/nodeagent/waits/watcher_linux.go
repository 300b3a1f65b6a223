//go:build linux

package waits

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// FileWatcher caps (defaults used when a field is <= 0).
const (
	DefaultMaxWatches       = 256  // watched directories (watch-cap-reached)
	DefaultMaxSubscriptions = 1024 // live subscriptions (watch-cap-reached)
	watchReadBuffer         = 64 << 10
)

// watchMask: changes of entries in a watched directory, and of the directory
// itself (deleted, moved, unmounted).
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_CLOSE_WRITE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

const selfMask = unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_IGNORED | unix.IN_UNMOUNT

// WatchCaps bound a FileWatcher.
type WatchCaps struct {
	MaxWatches       int
	MaxSubscriptions int
}

// FileWatcher turns inotify events into per-subscription change signals. One
// inotify instance and one reader goroutine serve every subscription; a
// subscription watches the parent directory of its path (or, while that does
// not exist yet, the deepest existing ancestor, moving down as directories
// appear). There is no polling fallback: when inotify is unusable (kernel
// limits, no /proc) subscribing refuses with watch-unavailable.
//
// Directories are located with openat2 beneath the root's directory and
// watched through their /proc/self/fd path, so a watch never lands outside
// the root. Watches serve only as wake-ups: every observation still goes
// through fsaccess, so a missed or spurious event can delay or repeat an
// evaluation, never widen access. Known limit: if an ancestor above the
// watched directory is renamed away, the watch follows the moved directory
// until the next self event or queue overflow re-arms it.
type FileWatcher struct {
	caps WatchCaps
	fd   int
	file *os.File

	mu      sync.Mutex
	watches map[int32]map[*Subscription]struct{}
	subs    map[*Subscription]struct{}
	closed  bool
	err     error
	done    chan struct{}
}

// Subscription is one watched path. C is ready (one coalesced value) after
// each relevant change.
type Subscription struct {
	w       *FileWatcher
	rootDir string
	rel     string
	c       chan struct{}

	// guarded by w.mu
	wd     int32 // -1 when not armed
	want   string
	final  bool // wd is the path's parent directory
	err    error
	closed bool
}

// NewFileWatcher starts an inotify instance. It refuses with
// watch-unavailable when the kernel cannot provide one.
func NewFileWatcher(c WatchCaps) (*FileWatcher, error) {
	if c.MaxWatches <= 0 {
		c.MaxWatches = DefaultMaxWatches
	}
	if c.MaxSubscriptions <= 0 {
		c.MaxSubscriptions = DefaultMaxSubscriptions
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, actuation.Refusef(actuation.CodeWatchUnavailable, "inotify_init1: %v (no polling fallback)", err)
	}
	w := &FileWatcher{
		caps:    c,
		fd:      fd,
		file:    os.NewFile(uintptr(fd), "inotify"), // non-blocking: parked on the runtime poller
		watches: map[int32]map[*Subscription]struct{}{},
		subs:    map[*Subscription]struct{}{},
		done:    make(chan struct{}),
	}
	go w.loop()
	return w, nil
}

// Caps returns the effective caps.
func (w *FileWatcher) Caps() WatchCaps { return w.caps }

// Counts returns the watched directories and live subscriptions.
func (w *FileWatcher) Counts() (watches, subscriptions int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches), len(w.subs)
}

// Close stops the watcher; live subscriptions then report watch-unavailable
// (their waits fail rather than hang silently).
func (w *FileWatcher) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.failLocked(actuation.Refusef(actuation.CodeWatchUnavailable, "file watcher closed"))
	w.mu.Unlock()
	err := w.file.Close()
	<-w.done
	return err
}

// Subscribe watches rel (a file path, checked like every relative path)
// beneath root. Refusals: path codes, symlink-escape (an ancestor leaves the
// root), watch-cap-reached, watch-unavailable.
func (w *FileWatcher) Subscribe(root *fsaccess.Root, rel string) (*Subscription, error) {
	if root == nil {
		return nil, actuation.Refusef(actuation.CodeWaitScopeInvalid, "watch %q: no root", rel)
	}
	if err := fsaccess.CheckRel(rel, true); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return nil, actuation.Refusef(actuation.CodeWatchUnavailable, "file watcher closed")
	case w.err != nil:
		return nil, actuation.Refusef(actuation.CodeWatchUnavailable, "file watcher failed: %v", w.err)
	case len(w.subs) >= w.caps.MaxSubscriptions:
		return nil, actuation.Refusef(actuation.CodeWatchCapReached, "%d watch subscriptions (cap %d)", len(w.subs), w.caps.MaxSubscriptions)
	}
	s := &Subscription{w: w, rootDir: root.Dir(), rel: rel, c: make(chan struct{}, 1), wd: -1}
	if err := w.armLocked(s); err != nil {
		return nil, err
	}
	w.subs[s] = struct{}{}
	return s, nil
}

// Source returns a FileSource for rel beneath root woken by a new
// subscription, which the engine releases when the wait ends.
func (w *FileWatcher) Source(root *fsaccess.Root, rel string) (Source, error) {
	s, err := w.Subscribe(root, rel)
	if err != nil {
		return nil, err
	}
	return &fileSource{root: root, rel: rel, notify: s.C(), sub: s, release: s.Close}, nil
}

// C is ready after each relevant change (coalesced, capacity 1).
func (s *Subscription) C() <-chan struct{} { return s.c }

// Err reports why the subscription can no longer deliver changes (nil while
// healthy).
func (s *Subscription) Err() error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.err
}

// Close ends the subscription (idempotent).
func (s *Subscription) Close() {
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	w.disarmLocked(s)
	delete(w.subs, s)
}

func (s *Subscription) notify() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// resolve finds the deepest existing directory on the way to rel's
// parent (beneath the root) and returns an O_PATH fd to it, the name awaited
// in it, and whether it is the parent itself.
func resolve(rootDir, rel string) (fd int, want string, final bool, err error) {
	rootfd, err := unix.Open(rootDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", false, fmt.Errorf("watch: open root %q: %w", rootDir, err)
	}
	defer unix.Close(rootfd)
	comps := strings.Split(rel, "/")
	parents := comps[:len(comps)-1]
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	for k := len(parents); k >= 0; k-- {
		p := "."
		if k > 0 {
			p = strings.Join(parents[:k], "/")
		}
		var fd int
		for i := 0; ; i++ {
			fd, err = unix.Openat2(rootfd, p, how)
			if (err == unix.EINTR || err == unix.EAGAIN) && i < 8 {
				continue
			}
			break
		}
		switch {
		case err == nil:
			return fd, comps[k], k == len(parents), nil
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
			continue
		case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
			return -1, "", false, actuation.Wrapf(actuation.CodeSymlinkEscape, err, "watch %s/%s: resolves outside the root", rootDir, p)
		case errors.Is(err, unix.ENOSYS):
			return -1, "", false, actuation.Refusef(actuation.CodeWatchUnavailable, "openat2 unavailable: %v", err)
		default:
			return -1, "", false, fmt.Errorf("watch %s/%s: %w", rootDir, p, err)
		}
	}
	return -1, "", false, fmt.Errorf("watch %s: root is gone: %w", rootDir, err)
}

func (w *FileWatcher) armLocked(s *Subscription) error {
	fd, want, final, err := resolve(s.rootDir, s.rel)
	if err != nil {
		return err
	}
	wd, err := unix.InotifyAddWatch(w.fd, fmt.Sprintf("/proc/self/fd/%d", fd), watchMask)
	unix.Close(fd)
	if err != nil {
		return actuation.Refusef(actuation.CodeWatchUnavailable, "inotify_add_watch for %q: %v (no polling fallback)", s.rel, err)
	}
	set, known := w.watches[int32(wd)]
	if !known {
		if len(w.watches) >= w.caps.MaxWatches {
			_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
			return actuation.Refusef(actuation.CodeWatchCapReached, "%d watched directories (cap %d)", len(w.watches), w.caps.MaxWatches)
		}
		set = map[*Subscription]struct{}{}
		w.watches[int32(wd)] = set
	}
	set[s] = struct{}{}
	s.wd, s.want, s.final = int32(wd), want, final
	return nil
}

func (w *FileWatcher) disarmLocked(s *Subscription) {
	if s.wd < 0 {
		return
	}
	if set := w.watches[s.wd]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(w.watches, s.wd)
			_, _ = unix.InotifyRmWatch(w.fd, uint32(s.wd))
		}
	}
	s.wd = -1
}

// rearmLocked re-resolves s (a directory on its way appeared, or its watched
// directory went away) and wakes it; a failure is kept as its error.
func (w *FileWatcher) rearmLocked(s *Subscription) {
	w.disarmLocked(s)
	if err := w.armLocked(s); err != nil {
		s.err = err
	}
	s.notify()
}

func (w *FileWatcher) failLocked(err error) {
	if w.err == nil {
		w.err = err
	}
	for s := range w.subs {
		if s.err == nil {
			s.err = err
		}
		s.notify()
	}
}

func (w *FileWatcher) loop() {
	defer close(w.done)
	buf := make([]byte, watchReadBuffer)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			w.mu.Lock()
			if !w.closed {
				w.failLocked(actuation.Refusef(actuation.CodeWatchUnavailable, "inotify read: %v", err))
			}
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			start := off + unix.SizeofInotifyEvent
			end := min(start+nameLen, n)
			name := string(bytes.TrimRight(buf[start:end], "\x00"))
			off = end
			w.handleLocked(wd, mask, name)
		}
		w.mu.Unlock()
	}
}

func (w *FileWatcher) handleLocked(wd int32, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		// Events were lost: wake everybody and re-resolve every watch.
		for s := range w.subs {
			w.rearmLocked(s)
		}
		return
	}
	set := w.watches[wd]
	if set == nil {
		return
	}
	self := mask&selfMask != 0
	if mask&unix.IN_IGNORED != 0 {
		// The kernel dropped the watch (directory deleted or unmounted).
		delete(w.watches, wd)
		for s := range set {
			s.wd = -1
		}
	}
	var rearm []*Subscription
	for s := range set {
		switch {
		case self:
			rearm = append(rearm, s)
		case name == s.want && !s.final:
			rearm = append(rearm, s) // a directory on the way appeared (or went)
		case name == s.want:
			s.notify()
		}
	}
	for _, s := range rearm {
		w.rearmLocked(s)
	}
}

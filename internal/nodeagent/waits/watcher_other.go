//go:build !linux

package waits

import (
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Off Linux there is no inotify: NewFileWatcher refuses with watch-unavailable (there
// is no polling fallback on any platform), so file waits are refused, never faked.

// Default caps, as on Linux.
const (
	DefaultMaxWatches       = 256  // watched directories (watch-cap-reached)
	DefaultMaxSubscriptions = 1024 // live subscriptions (watch-cap-reached)
)

// WatchCaps bounds one watcher.
type WatchCaps struct {
	MaxWatches       int
	MaxSubscriptions int
}

// FileWatcher is never constructed off Linux.
type FileWatcher struct{ caps WatchCaps }

// Subscription is never constructed off Linux.
type Subscription struct{}

// NewFileWatcher refuses: file watches need inotify.
func NewFileWatcher(WatchCaps) (*FileWatcher, error) {
	return nil, actuation.Refusef(actuation.CodeWatchUnavailable, "file watches need inotify, which only Linux has (no polling fallback)")
}

func (w *FileWatcher) Caps() WatchCaps { return w.caps }

func (w *FileWatcher) Counts() (watches, subscriptions int) { return 0, 0 }

func (w *FileWatcher) Close() error { return nil }

func (w *FileWatcher) Subscribe(*fsaccess.Root, string) (*Subscription, error) {
	return nil, actuation.Refusef(actuation.CodeWatchUnavailable, "file watches need inotify, which only Linux has")
}

func (w *FileWatcher) Source(*fsaccess.Root, string) (Source, error) {
	return nil, actuation.Refusef(actuation.CodeWatchUnavailable, "file watches need inotify, which only Linux has")
}

func (s *Subscription) C() <-chan struct{} { return nil }

func (s *Subscription) Err() error {
	return actuation.Refusef(actuation.CodeWatchUnavailable, "file watches need inotify, which only Linux has")
}

func (s *Subscription) Close() {}

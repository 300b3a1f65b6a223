//go:build !linux

package loopdisk

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// Off Linux there are no loop devices: every operation that would create, mount or
// detach a disk refuses (capability-mismatch); nothing is faked.

// Bounds, as on Linux.
const (
	// MinBytes is the smallest disk.
	MinBytes = 16 << 20
	// MaxBytes bounds one disk (1 TiB).
	MaxBytes = 1 << 40
)

// FSType is the filesystem of every disk.
const FSType = "ext4"

// MountInfo is one mount of this process's mount namespace.
type MountInfo struct {
	Point  string // mount point
	FSType string
	Source string // e.g. /dev/loop3
}

func errNoLoop() error {
	return actuation.Refusef(actuation.CodeCapabilityMismatch, "loop-device disks need Linux")
}

// Check refuses: there are no loop devices here.
func Check() error { return errNoLoop() }

// Format refuses.
func Format(context.Context, string, int64) error { return errNoLoop() }

// Mount refuses.
func Mount(string, string) error { return errNoLoop() }

// Unmount refuses.
func Unmount(string) error { return errNoLoop() }

// MountsUnder refuses (there is no /proc/self/mountinfo).
func MountsUnder(string) ([]MountInfo, error) { return nil, errNoLoop() }

// BackingFile is empty: no loop device has a backing file here.
func BackingFile(string) string { return "" }

// LoopsBackedBy refuses.
func LoopsBackedBy(string) ([]string, error) { return nil, errNoLoop() }

// Detach refuses.
func Detach(string) error { return errNoLoop() }

// errExhausted is the storage-exhausted refusal.
func errExhausted(format string, args ...any) error {
	return actuation.Refusef(actuation.CodeStorageExhausted, format, args...)
}

func availBytes(st *unix.Statfs_t) int64 { return int64(st.Bavail) * int64(st.Bsize) }

func bindMount(string, string) error { return errNoLoop() }

func remountBindSafe(string) error { return errNoLoop() }

func fileClone(*os.File, *os.File) error { return errors.New("loopdisk: FICLONE needs Linux") }

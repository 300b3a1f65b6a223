package fsaccess

import (
	"context"
	"errors"
	"io/fs"

	"sensorium.dev/workbench/internal/actuation"
)

// Files is one environment root's file access, wherever the root lives: a host directory
// (Host over a pinned Root) or a directory inside a VM guest
// (internal/backends/guestfs.Root, over the guest protocol). Both apply the rules of
// this package, each in one place: CheckRel (path validation), CheckRead (read
// arguments and caps), SnapshotLimits.WithDefaults and SnapshotLimits.DigestOmission
// (snapshot bounds and the hashing budget), DigestOmitted reasons and refusal codes.
type Files interface {
	// Snapshot lists rel ("" = the root) within lim.
	Snapshot(ctx context.Context, rel string, lim SnapshotLimits) (*Snapshot, error)
	// Read returns at most maxBytes of the regular file rel from offset, with the
	// whole file's digest (ReadResult).
	Read(ctx context.Context, rel string, offset int64, maxBytes int) (*ReadResult, error)
	// Exists reports whether rel exists beneath the root, with a detail for a wait's
	// observation ("exists (<type>)" or "absent"). A parent that is not a directory
	// counts as absent.
	Exists(ctx context.Context, rel string) (bool, string, error)
}

// Host is the Files of a host directory opened as a Root (nil for a nil root). Its
// operations are local and bounded by this package's caps; the context is not consulted.
func Host(r *Root) Files {
	if r == nil {
		return nil
	}
	return hostFiles{r}
}

type hostFiles struct{ r *Root }

func (h hostFiles) Snapshot(_ context.Context, rel string, lim SnapshotLimits) (*Snapshot, error) {
	return h.r.Snapshot(rel, lim)
}

func (h hostFiles) Read(_ context.Context, rel string, offset int64, maxBytes int) (*ReadResult, error) {
	return h.r.Read(rel, offset, maxBytes)
}

func (h hostFiles) Exists(_ context.Context, rel string) (bool, string, error) {
	if err := CheckRel(rel, true); err != nil {
		return false, "", err
	}
	e, err := h.r.Lstat(rel)
	switch {
	case err == nil:
		return true, "exists (" + string(e.Type) + ")", nil
	case IsAbsent(err):
		return false, "absent", nil
	}
	return false, "", err
}

// IsAbsent reports whether err says a path or one of its parents does not exist (a
// parent that is not a directory counts as absent too).
func IsAbsent(err error) bool {
	c := actuation.CodeOf(err)
	return errors.Is(err, fs.ErrNotExist) || c == actuation.CodePathNotFound || c == actuation.CodeNotDirectory
}

// CheckRead is the one check of a read's arguments (host and guest): rel names a file
// (CheckRel), offset is not negative, maxBytes defaults to DefaultReadBytes and is
// refused above MaxReadBytesHard. display names rel in messages. It returns maxBytes.
func CheckRead(display, rel string, offset int64, maxBytes int) (int, error) {
	if err := CheckRel(rel, true); err != nil {
		return 0, err
	}
	if offset < 0 {
		return 0, actuation.Refusef(actuation.CodeInvalidArgument, "read %s: negative offset %d", display, offset)
	}
	if maxBytes <= 0 {
		maxBytes = DefaultReadBytes
	}
	if maxBytes > MaxReadBytesHard {
		return 0, actuation.Refusef(actuation.CodeReadCapAboveMax, "read %s: maxBytes %d above hard max %d", display, maxBytes, MaxReadBytesHard)
	}
	return maxBytes, nil
}

// WithDefaults fills every limit <= 0 with its default.
func (l SnapshotLimits) WithDefaults() SnapshotLimits {
	l.MaxEntries = actuation.OrDefault(l.MaxEntries, DefaultMaxEntries)
	l.MaxDepth = actuation.OrDefault(l.MaxDepth, DefaultMaxDepth)
	l.MaxFileBytesToHash = actuation.OrDefault(l.MaxFileBytesToHash, DefaultMaxFileBytesToHash)
	l.MaxTotalBytesToHash = actuation.OrDefault(l.MaxTotalBytesToHash, DefaultMaxTotalBytesToHash)
	return l
}

// Digest omission reasons of the snapshot caps.
const (
	OmitOverFileCap  = "over-file-cap"
	OmitOverTotalCap = "over-total-cap"
)

// DigestOmission is the snapshot's hashing rule for one regular file of size (l with
// defaults): OmitOverFileCap above MaxFileBytesToHash, OmitOverTotalCap above what
// remains of *budget (which starts at MaxTotalBytesToHash); otherwise "" and size is
// spent from *budget, whether or not the hash then succeeds.
func (l SnapshotLimits) DigestOmission(size int64, budget *int64) string {
	switch {
	case size > l.MaxFileBytesToHash:
		return OmitOverFileCap
	case size > *budget:
		return OmitOverTotalCap
	}
	*budget -= size
	return ""
}

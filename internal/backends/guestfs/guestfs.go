// Package guestfs gives the node agent file access to an environment root that lives
// inside a VM guest, through the guest protocol (internal/guestclient): bounded snapshots
// and reads with the results and refusal codes of fsaccess, FilePatch application with the
// guest's base-digest check, probes of a file's presence and digest, and exports
// re-encoded into the host's deterministic tar (fixture.ExportRoot's format).
//
// Everything the guest returns is untrusted: guestclient re-checks sizes, offsets,
// transfer digests and stage refs; this package recomputes every content digest it reports
// from the bytes it received (a snapshot's per-file digests are the guest's own
// observation of its own files and are reported as such), bounds every listing and
// transfer, and re-validates every path and entry type of an export before re-encoding it.
//
// Differences from a host root, all forced by the guest protocol v1 (no lstat, no delete,
// no mkdir, no change notifications): a final symlink is resolved beneath the guest root
// by reads and snapshots (a dangling one is absent); a FilePatch cannot delete files or
// create parent directories, and creates files with mode 0644; file waits are refused
// by the caller. The package has no Kubernetes imports.
package guestfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Bounds.
const (
	// OpTimeout bounds one operation (connect, handshake and its requests) when the
	// caller's context allows longer.
	OpTimeout = 60 * time.Second
	// chunkBytes is the window of the bounded reads that hash or fetch a whole file.
	chunkBytes = 8 << 20
	// lstatEntries bounds the parent listing that describes a single non-directory path.
	lstatEntries = fsaccess.DefaultMaxEntries
)

// Dialer opens a handshaken channel to the environment's guest (the backend's host broker
// supplies endpoint and binding). The caller closes the client.
type Dialer func(ctx context.Context) (*guestclient.Client, error)

// Root is one environment root inside a guest: a directory beneath the guest agent's root.
// It holds no connection; every operation opens its own channel. Safe for concurrent use.
type Root struct {
	dial Dialer
	dir  string
}

// New returns the root dir (relative to the guest agent's root, e.g. the root's name).
func New(dial Dialer, dir string) (*Root, error) {
	if dial == nil {
		return nil, errors.New("guestfs: no dialer")
	}
	if err := protocol.CheckPath(dir, false); err != nil {
		return nil, fmt.Errorf("guestfs: root directory %q: %w", dir, err)
	}
	return &Root{dial: dial, dir: dir}, nil
}

// Dir returns the root's directory beneath the guest agent's root (for messages only).
func (r *Root) Dir() string { return r.dir }

// guestPath is rel's path beneath the guest agent's root.
func (r *Root) guestPath(rel string) string {
	if rel == "" {
		return r.dir
	}
	return r.dir + "/" + rel
}

func (r *Root) display(rel string) string { return "guest:" + r.guestPath(rel) }

// channel is a lazily (re)dialled guest channel. A channel is dropped after any failed
// request (a refused one leaves it usable, but redialling is cheap and never wrong), and
// closed when the context ends: the guest client itself observes only deadlines.
type channel struct {
	r    *Root
	c    *guestclient.Client
	stop func() bool
}

func (r *Root) channel() *channel { return &channel{r: r} }

func (k *channel) get(ctx context.Context) (*guestclient.Client, error) {
	if k.c != nil {
		return k.c, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailable(fmt.Errorf("guestfs: %w", err))
	}
	c, err := k.r.dial(ctx)
	if err != nil {
		if guestclient.GuestCode(err) == "" && actuation.CodeOf(err) != "" {
			return nil, err // the broker's own refusal (vm-not-running)
		}
		return nil, unavailable(err)
	}
	k.c, k.stop = c, context.AfterFunc(ctx, func() { _ = c.Close() })
	return c, nil
}

func (k *channel) drop() {
	if k.c != nil {
		k.stop()
		_ = k.c.Close()
		k.c = nil
	}
}

// with runs fn with a channel bounded by OpTimeout.
func (r *Root) with(ctx context.Context, fn func(ctx context.Context, k *channel) error) error {
	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	k := r.channel()
	defer k.drop()
	return fn(ctx, k)
}

func unavailable(err error) error {
	return actuation.Wrapf(actuation.CodeEnvironmentUnavailable, err, "the environment's guest did not complete the file operation")
}

// channelFailure reports whether err is a failure of the channel rather than the guest's
// refusal of the operation.
func channelFailure(err error) bool {
	switch guestclient.GuestCode(err) {
	case "", actuation.CodeDeadlineExceeded, actuation.CodeQuiesced, actuation.CodeShuttingDown, actuation.CodeConnectionCap,
		actuation.CodeGenerationMismatch, actuation.CodeNonceMismatch, actuation.CodeEnvironmentMismatch,
		actuation.CodePlanDigestMismatch, actuation.CodeImageDigestMismatch, actuation.CodeBindingUnavailable:
		return true
	}
	return errors.Is(err, guestclient.ErrUnknownOutcome) || errors.Is(err, guestclient.ErrProtocol) || errors.Is(err, guestclient.ErrBroken)
}

// mapErr turns a guest refusal (guestclient.GuestCode) into fsaccess's code for the same
// condition; channel failures become environment-unavailable; any other guest refusal
// (io-error) stays uncoded: its text is kept, its guest code is not reported as the
// node's. A refusal of the broker or the host (or one mapped already) passes as it is.
func (r *Root) mapErr(what, rel string, err error) error {
	gc := guestclient.GuestCode(err)
	if err == nil || gc == "" && actuation.CodeOf(err) != "" {
		return err
	}
	d := r.display(rel)
	if protocol.IsPathCode(gc) {
		return actuation.Wrapf(gc, err, "%s %s", what, d) // the guest applies the host's path rule
	}
	switch gc {
	case actuation.CodeNotFound:
		return actuation.Wrapf(actuation.CodePathNotFound, fmt.Errorf("%w: %w", fs.ErrNotExist, err), "%s %s", what, d)
	case actuation.CodeNotDirectory:
		return actuation.Wrapf(actuation.CodeNotDirectory, err, "%s %s: a component is not a directory", what, d)
	case actuation.CodeNotRegularFile:
		return actuation.Wrapf(actuation.CodeNotRegularFile, err, "%s %s: not a regular file", what, d)
	case actuation.CodeSymlinkEscape:
		return actuation.Wrapf(actuation.CodeSymlinkEscape, err, "%s %s: resolves outside the root", what, d)
	case actuation.CodeTooLarge:
		return actuation.Wrapf(actuation.CodeTooManyEntries, err, "%s %s: beyond what the guest walks", what, d)
	case actuation.CodeAnswerOverBound:
		// The guest answered beyond the request's bounds (refused while decoding; the
		// channel is closed): named as such, not as an unavailable environment.
		return actuation.Wrapf(actuation.CodeAnswerOverBound, err, "%s %s: the guest's answer exceeds the request's bounds", what, d)
	}
	if channelFailure(err) {
		return unavailable(fmt.Errorf("%s %s: %w", what, d, err))
	}
	return fmt.Errorf("guestfs: %s %s: %v", what, d, err)
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	if name == "" {
		return dir
	}
	return dir + "/" + name
}

func splitParent(rel string) (string, string) {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i], rel[i+1:]
	}
	return "", rel
}

// toEntry converts a guest entry (its path relative to the listed directory) into an
// fsaccess entry at rel, with the mode bits fsaccess reports.
func toEntry(rel string, e protocol.Entry) fsaccess.Entry {
	mode := fsaccess.PermMode(e.Mode)
	out := fsaccess.Entry{Path: rel, Size: e.Size, ModTime: time.Unix(0, e.MTime).UTC()}
	switch e.Type {
	case "file":
		out.Type = fsaccess.TypeFile
	case "dir":
		out.Type, mode = fsaccess.TypeDir, mode|fs.ModeDir
	case "symlink":
		out.Type, mode, out.LinkTarget = fsaccess.TypeSymlink, mode|fs.ModeSymlink, e.Link
	default:
		out.Type, mode = fsaccess.TypeOther, mode|fs.ModeIrregular
	}
	out.Mode = mode
	return out
}

var _ fsaccess.Files = (*Root)(nil) // the same file-access interface as a host root (fsaccess.Host)

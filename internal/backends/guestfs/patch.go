package guestfs

import (
	"context"
	"errors"
	"fmt"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/patch"
)

// ErrOutcomeUnknown: a patch's effect on the guest's files cannot be proved (an apply or
// a rollback was admitted but its answer was lost, and re-reading the file did not settle
// it). Returned wrapped; never for a refusal. It is the port's backends.ErrPatchOutcomeUnknown.
var ErrOutcomeUnknown = backends.ErrPatchOutcomeUnknown

// beforeApply is a test hook called before each file is replaced.
var beforeApply func(rel string)

// guestCreateMode is the mode patch.apply gives a file it creates.
const guestCreateMode = 0o644

// source reads patch targets for patch.PlanChanges: the whole content (bounded by
// patch.MaxFileBytes) through one bounded read, its digest computed on the host.
type source struct {
	ctx context.Context
	r   *Root
	k   *channel
}

func (s source) Current(rel string) (bool, []byte, fsaccess.Entry, error) {
	e := fsaccess.Entry{Path: rel}
	c, err := s.k.get(s.ctx)
	if err != nil {
		return false, nil, e, err
	}
	d, b, err := c.ReadFile(s.ctx, "", protocol.ReadArgs{Path: s.r.guestPath(rel), Max: patch.MaxFileBytes + 1})
	switch guestclient.GuestCode(err) {
	case "":
		if err != nil {
			s.k.drop()
			return false, nil, e, s.r.mapErr("read", rel, err)
		}
	case actuation.CodeNotFound:
		return false, nil, e, nil
	case actuation.CodeNotDirectory:
		return false, nil, e, actuation.Wrapf(actuation.CodePatchDirty, err, "a parent of %q is not a directory", rel)
	case actuation.CodeSymlinkEscape:
		return false, nil, e, actuation.Wrapf(actuation.CodePatchOutsideRoot, err, "path %q resolves outside the root", rel)
	case actuation.CodeNotRegularFile:
		return false, nil, e, actuation.Wrapf(actuation.CodePatchTargetNotRegular, err, "target %q is not a regular file", rel)
	default:
		s.k.drop()
		return false, nil, e, s.r.mapErr("read", rel, err)
	}
	if d.Size > patch.MaxFileBytes || len(b) > patch.MaxFileBytes {
		return false, nil, e, actuation.Refusef(actuation.CodePatchTooLarge, "target %q above %d bytes", rel, patch.MaxFileBytes)
	}
	if !d.EOF || int64(len(b)) != d.Size {
		return false, nil, e, actuation.Refusef(actuation.CodePatchDirty, "%q changed while it was read", rel)
	}
	e.Type, e.Size, e.Digest = fsaccess.TypeFile, d.Size, fsaccess.DigestBytes(b)
	return true, b, e, nil
}

// ApplyPatch verifies and computes req against the guest's current files on the host
// (patch.PlanChanges: every check and cap of a host patch), then changes the files through
// the guest, as close to all-or-nothing as the protocol allows:
//
//  1. refusals that need no write: deletes and missing parent directories (the protocol
//     has no delete and no mkdir: capability-mismatch), creates with a mode other than
//     0644 (patch-mode-unsupported);
//  2. every new content is staged (and, for a patch of several files, the original
//     content of every file it replaces, for the rollback); a staging failure changes
//     nothing;
//  3. files are replaced (replacements first, creates last), each only if its content
//     still has the digest it was planned against (the guest re-checks it right before
//     its rename); a refusal restores the already replaced files from their staged
//     originals, each only if it still holds the patch's content.
//
// A create cannot be undone (no delete): if a later create fails, the patch ends
// patch-rollback-incomplete. An apply whose answer was lost is settled by re-reading the
// file's digest; if that does not settle it, the error wraps ErrOutcomeUnknown.
func (r *Root) ApplyPatch(ctx context.Context, req patch.Request) (*patch.Result, error) {
	var changes []patch.Change
	err := r.with(ctx, func(ctx context.Context, k *channel) error {
		var err error
		changes, err = patch.PlanChanges(source{ctx: ctx, r: r, k: k}, req)
		if err != nil {
			return err
		}
		return r.precheck(ctx, k, changes)
	})
	if err != nil {
		return nil, err
	}
	refs, origs, err := r.stage(ctx, changes)
	if err != nil {
		return nil, err
	}
	if err := r.apply(ctx, changes, refs, origs); err != nil {
		return nil, err
	}
	return &patch.Result{ChangedFiles: patch.Summarize(changes)}, nil
}

func (r *Root) precheck(ctx context.Context, k *channel, changes []patch.Change) error {
	parents := map[string]bool{}
	for _, ch := range changes {
		switch {
		case ch.Op == patch.OpDelete:
			return actuation.Refusef(actuation.CodeCapabilityMismatch, "delete %q: deleting files on VM environments is not available: the guest protocol has no delete", ch.Path)
		case ch.Existed:
			continue
		case ch.NewMode.Perm() != guestCreateMode:
			return actuation.Refusef(actuation.CodePatchModeUnsupported, "create %q with mode %o: the guest creates files with mode %o", ch.Path, ch.NewMode.Perm(), guestCreateMode)
		}
		parent, _ := splitParent(ch.Path)
		if parent == "" || parents[parent] {
			continue
		}
		parents[parent] = true
		c, err := k.get(ctx)
		if err != nil {
			return err
		}
		_, err = c.Snapshot(ctx, "", protocol.SnapshotArgs{Path: r.guestPath(parent), MaxEntries: 1})
		switch guestclient.GuestCode(err) {
		case "":
			if err != nil {
				k.drop()
				return r.mapErr("stat", parent, err)
			}
		case actuation.CodeNotFound:
			// The guest agent's patch.apply of a create makes the missing parents itself
			// (beneath its root, never through a link: guest/agent/stage.go mkdirParents).
			continue
		case actuation.CodeNotDirectory:
			return actuation.Wrapf(actuation.CodePatchDirty, err, "a parent of %q is not a directory", ch.Path)
		case actuation.CodeSymlinkEscape:
			return actuation.Wrapf(actuation.CodePatchOutsideRoot, err, "path %q resolves outside the root", ch.Path)
		default:
			k.drop()
			return r.mapErr("stat", parent, err)
		}
	}
	return nil
}

// stage uploads every new content and, for a patch of several files, every replaced
// original. A stage whose receipt was lost is replayed once (an exact replay returns the
// same ref and rewrites nothing). Nothing in the root changes here.
func (r *Root) stage(ctx context.Context, changes []patch.Change) (refs, origs []string, err error) {
	refs, origs = make([]string, len(changes)), make([]string, len(changes))
	err = r.with(ctx, func(ctx context.Context, k *channel) error {
		put := func(rel string, content []byte) (string, error) {
			var last error
			for attempt := 0; attempt < 2; attempt++ {
				c, err := k.get(ctx)
				if err != nil {
					return "", err
				}
				d, err := c.StagePatch(ctx, "", r.guestPath(rel), content)
				if err == nil {
					return d.Ref, nil
				}
				k.drop()
				last = err
				if !errors.Is(err, guestclient.ErrUnknownOutcome) {
					break
				}
			}
			switch guestclient.GuestCode(last) {
			case actuation.CodeStageCapReached, actuation.CodeTransferTooLarge:
				return "", actuation.Wrapf(actuation.CodePatchTooLarge, last, "staging %q in the guest: the guest retains at most %d stages and %d bytes per boot", rel, protocol.MaxStages, protocol.MaxStageBytes)
			case actuation.CodeIOError, actuation.CodeStageInFlight:
				return "", actuation.Wrapf(actuation.CodePatchWriteFailed, last, "staging %q in the guest", rel)
			}
			return "", r.mapErr("stage", rel, last)
		}
		for i, ch := range changes {
			ref, err := put(ch.Path, ch.NewContent)
			if err != nil {
				return err
			}
			refs[i] = ref
			if ch.Existed && len(changes) > 1 {
				if origs[i], err = put(ch.Path, ch.OldContent); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return refs, origs, err
}

// apply replaces the files in order (replacements, then creates) and rolls back on a
// refusal.
func (r *Root) apply(ctx context.Context, changes []patch.Change, refs, origs []string) error {
	order := make([]int, 0, len(changes))
	for i, ch := range changes {
		if ch.Existed {
			order = append(order, i)
		}
	}
	for i, ch := range changes {
		if !ch.Existed {
			order = append(order, i)
		}
	}
	return r.with(ctx, func(ctx context.Context, k *channel) error {
		var done []int
		for n, i := range order {
			ch := changes[i]
			base := ch.OldDigest
			if !ch.Existed {
				base = protocol.BaseAbsent
			}
			if beforeApply != nil {
				beforeApply(ch.Path)
			}
			applied, cause := r.replace(ctx, k, ch.Path, refs[i], base, ch.NewDigest)
			switch applied {
			case settledYes:
				done = append(done, i)
				continue
			case settledUnknown:
				// The cause is kept as text: an unknown outcome carries no refusal code.
				return fmt.Errorf("%w: applying %q (change %d/%d): %v", ErrOutcomeUnknown, ch.Path, n+1, len(order), cause)
			}
			return r.rollback(ctx, k, changes, origs, done, ch, cause)
		}
		return nil
	})
}

type settled int

const (
	settledNo settled = iota
	settledYes
	settledUnknown
)

// replace applies stage ref to rel if rel's content has digest base ("absent": rel must
// not exist). An apply whose answer was lost may still be running in the guest, so a
// re-read cannot prove it did not happen; instead the same conditional apply is sent
// again (at most twice): of the two, at most one can find the base and succeed. A retry
// refused after a lost answer is settled by the file's digest: want means the first one
// landed; anything else is unknown.
func (r *Root) replace(ctx context.Context, k *channel, rel, ref, base, want string) (settled, error) {
	var lost error
	for attempt := 0; attempt < 3; attempt++ {
		c, err := k.get(ctx)
		if err != nil {
			if lost == nil {
				return settledNo, err // nothing was sent
			}
			return settledUnknown, fmt.Errorf("%w (and reconnecting failed: %w)", lost, err)
		}
		_, err = c.ApplyPatch(ctx, "", protocol.ApplyArgs{Ref: ref, Target: r.guestPath(rel), Base: base})
		if err == nil {
			return settledYes, nil
		}
		k.drop()
		switch {
		case ambiguous(err):
			if lost == nil {
				lost = err
			}
			continue
		case lost == nil:
			return settledNo, r.applyErr(rel, err) // refused: nothing was done
		}
		now, rerr := r.currentDigest(ctx, k, rel)
		if rerr == nil && now == want {
			return settledYes, nil
		}
		return settledUnknown, fmt.Errorf("%w (a retry was refused: %w; re-reading: digest %q, %v)", lost, err, now, rerr)
	}
	return settledUnknown, lost
}

// ambiguous reports whether err leaves open whether an admitted request had its effect: a
// refusal (the guest's, or the client's before sending) never does.
func ambiguous(err error) bool {
	return errors.Is(err, guestclient.ErrUnknownOutcome) || errors.Is(err, guestclient.ErrProtocol) || guestclient.GuestCode(err) == ""
}

// applyErr maps a refused patch.apply onto the patch vocabulary.
func (r *Root) applyErr(rel string, err error) error {
	if guestclient.GuestCode(err) == "" && actuation.CodeOf(err) != "" {
		return err
	}
	switch guestclient.GuestCode(err) {
	case actuation.CodeBaseMismatch:
		return actuation.Wrapf(actuation.CodePatchDirty, err, "%q changed since the patch was planned", rel)
	case actuation.CodeNotRegularFile:
		return actuation.Wrapf(actuation.CodePatchTargetNotRegular, err, "target %q is not a regular file", rel)
	case actuation.CodeSymlinkEscape:
		return actuation.Wrapf(actuation.CodePatchOutsideRoot, err, "path %q resolves outside the root", rel)
	case actuation.CodeNotFound, actuation.CodeNotDirectory:
		return actuation.Wrapf(actuation.CodePatchDirty, err, "the directory of %q changed since the patch was planned", rel)
	}
	if channelFailure(err) {
		return unavailable(fmt.Errorf("applying %q in the guest: %w", rel, err))
	}
	return actuation.Wrapf(actuation.CodePatchWriteFailed, err, "applying %q in the guest", rel)
}

// currentDigest reads rel's digest on the host ("absent" when it does not exist).
func (r *Root) currentDigest(ctx context.Context, k *channel, rel string) (string, error) {
	c, err := k.get(ctx)
	if err != nil {
		return "", err
	}
	_, b, err := c.ReadFile(ctx, "", protocol.ReadArgs{Path: r.guestPath(rel), Max: patch.MaxFileBytes + 1})
	switch {
	case guestclient.GuestCode(err) == actuation.CodeNotFound:
		return protocol.BaseAbsent, nil
	case err != nil:
		k.drop()
		return "", err
	}
	return fsaccess.DigestBytes(b), nil
}

// rollback restores the applied files (newest first) from their staged originals, each
// only if it still holds the patch's content, and returns the refusal of failed.
func (r *Root) rollback(ctx context.Context, k *channel, changes []patch.Change, origs []string, done []int, failed patch.Change, cause error) error {
	var incomplete, unknown []error
	for j := len(done) - 1; j >= 0; j-- {
		ch := changes[done[j]]
		if !ch.Existed {
			incomplete = append(incomplete, fmt.Errorf("created %q cannot be removed: the guest protocol has no delete", ch.Path))
			continue
		}
		switch s, err := r.replace(ctx, k, ch.Path, origs[done[j]], ch.NewDigest, ch.OldDigest); s {
		case settledNo:
			incomplete = append(incomplete, fmt.Errorf("restore %q: %w", ch.Path, err))
		case settledUnknown:
			unknown = append(unknown, fmt.Errorf("restore %q: %w", ch.Path, err))
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%w: change %q failed and the rollback's outcome cannot be proved: %v", ErrOutcomeUnknown, failed.Path,
			errors.Join(append(append([]error{cause}, unknown...), incomplete...)...))
	}
	if len(incomplete) > 0 {
		return &actuation.Refusal{Code: actuation.CodePatchRollbackIncomplete,
			Message: fmt.Sprintf("writing %q failed and rollback of %d change(s) was incomplete", failed.Path, len(done)),
			Cause:   errors.Join(append([]error{cause}, incomplete...)...)}
	}
	code := actuation.CodeOf(cause)
	if code == "" {
		code = actuation.CodePatchWriteFailed
	}
	return &actuation.Refusal{Code: code,
		Message: fmt.Sprintf("change %q failed; %d written change(s) rolled back", failed.Path, len(done)), Cause: cause}
}

package guestfs

import (
	"context"
	"fmt"
	"strings"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Snapshot lists rel ("" = the root) like fsaccess.Root.Snapshot: entries in the guest's
// sorted depth-first order with root-relative paths, at most lim.MaxEntries, nothing
// deeper than lim.MaxDepth, per-file and total hashing caps with the same DigestOmitted
// reasons. A non-directory rel is reported alone. The per-file digests are the guest's
// observation of its own files.
func (r *Root) Snapshot(ctx context.Context, rel string, lim fsaccess.SnapshotLimits) (*fsaccess.Snapshot, error) {
	if err := fsaccess.CheckRel(rel, false); err != nil {
		return nil, err
	}
	lim = lim.WithDefaults()
	snap := &fsaccess.Snapshot{Root: rel, Entries: []fsaccess.Entry{}}
	trunc := func(reason string) {
		snap.Truncated = true
		for _, t := range snap.TruncatedBy {
			if t == reason {
				return
			}
		}
		snap.TruncatedBy = append(snap.TruncatedBy, reason)
	}
	hashMax := uint64(min(lim.MaxFileBytesToHash, protocol.MaxTransfer))
	err := r.with(ctx, func(ctx context.Context, k *channel) error {
		c, err := k.get(ctx)
		if err != nil {
			return err
		}
		res, err := c.Snapshot(ctx, "", protocol.SnapshotArgs{Path: r.guestPath(rel), MaxEntries: uint32(min(lim.MaxEntries, protocol.MaxSnapshotEntries)), HashMax: hashMax})
		if guestclient.GuestCode(err) == actuation.CodeNotDirectory && rel != "" {
			// Not a directory: reported alone, as fsaccess does.
			e, err := r.lstat(ctx, k, rel)
			if err != nil {
				return err
			}
			budget := lim.MaxTotalBytesToHash
			if e.Type == fsaccess.TypeFile {
				if e.DigestOmitted = lim.DigestOmission(e.Size, &budget); e.DigestOmitted == "" {
					if e.Digest, e.DigestOmitted, err = r.hash(ctx, k, rel, e.Size); err != nil {
						return err
					}
				}
			}
			snap.Entries = append(snap.Entries, e)
			return nil
		}
		if err != nil {
			return r.mapErr("snapshot", rel, err)
		}
		budget := lim.MaxTotalBytesToHash
		guestHashed := uint64(0) // what the guest's own hashing budget has spent
		for _, ge := range res.Entries {
			if ge.Size < 0 {
				return unavailable(fmt.Errorf("%w: snapshot entry %q has size %d", guestclient.ErrProtocol, protocol.Truncate(ge.Path), ge.Size))
			}
			if ge.Digest != "" {
				guestHashed += uint64(ge.Size)
			}
			depth := strings.Count(ge.Path, "/") + 1
			if depth > lim.MaxDepth {
				trunc(fsaccess.TruncMaxDepth)
				continue
			}
			e := toEntry(join(rel, ge.Path), ge)
			switch {
			case e.Type == fsaccess.TypeDir && depth >= lim.MaxDepth:
				trunc(fsaccess.TruncMaxDepth)
			case e.Type != fsaccess.TypeFile:
			default:
				if e.DigestOmitted = lim.DigestOmission(e.Size, &budget); e.DigestOmitted != "" {
					break
				}
				// Within the host's caps: the guest's own digest, or why the guest's
				// tighter bounds (one transfer) left it out.
				switch {
				case ge.Digest != "":
					e.Digest = ge.Digest
				case uint64(e.Size) > hashMax:
					e.DigestOmitted = fsaccess.OmitOverFileCap
				case guestHashed+uint64(e.Size) > protocol.MaxTransfer:
					e.DigestOmitted = fsaccess.OmitOverTotalCap
				default:
					e.DigestOmitted = "unreadable"
				}
			}
			snap.Entries = append(snap.Entries, e)
		}
		if res.Truncated {
			trunc(fsaccess.TruncMaxEntries)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return snap, nil
}

// lstat describes the non-directory rel from its parent's listing (the protocol has no
// stat): a symlink is described, not followed. When the listing is cut short before rel,
// rel is described from a one-byte read instead (type file or other, no mode or time).
func (r *Root) lstat(ctx context.Context, k *channel, rel string) (fsaccess.Entry, error) {
	parent, base := splitParent(rel)
	c, err := k.get(ctx)
	if err != nil {
		return fsaccess.Entry{}, err
	}
	res, err := c.Snapshot(ctx, "", protocol.SnapshotArgs{Path: r.guestPath(parent), MaxEntries: lstatEntries})
	if err != nil {
		k.drop()
		return fsaccess.Entry{}, r.mapErr("lstat", rel, err)
	}
	for _, ge := range res.Entries {
		if ge.Path == base {
			if ge.Size < 0 {
				return fsaccess.Entry{}, unavailable(fmt.Errorf("%w: entry %q has size %d", guestclient.ErrProtocol, protocol.Truncate(ge.Path), ge.Size))
			}
			return toEntry(rel, ge), nil
		}
	}
	if !res.Truncated {
		return fsaccess.Entry{}, r.mapErr("lstat", rel, &actuation.Refusal{Code: actuation.CodeNotFound, Message: fmt.Sprintf("%q is not in its parent's listing", rel), Cause: guestclient.ErrGuestRefused})
	}
	d, _, err := c.ReadFile(ctx, "", protocol.ReadArgs{Path: r.guestPath(rel), Max: 1})
	switch {
	case err == nil:
		return fsaccess.Entry{Path: rel, Type: fsaccess.TypeFile, Size: d.Size}, nil
	case guestclient.GuestCode(err) == actuation.CodeNotRegularFile:
		return fsaccess.Entry{Path: rel, Type: fsaccess.TypeOther}, nil
	}
	k.drop()
	return fsaccess.Entry{}, r.mapErr("lstat", rel, err)
}

// hash computes the digest of the regular file rel on the host from bounded reads (the
// guest's claims are not used): "changed-during-read" when its size moved or it
// disappeared meanwhile.
func (r *Root) hash(ctx context.Context, k *channel, rel string, size int64) (digest, omitted string, err error) {
	d := fsaccess.NewDigester()
	var off int64
	for {
		c, err := k.get(ctx)
		if err != nil {
			return "", "", err
		}
		rd, b, err := c.ReadFile(ctx, "", protocol.ReadArgs{Path: r.guestPath(rel), Offset: uint64(off), Max: chunkBytes})
		switch code := guestclient.GuestCode(err); {
		case err == nil:
		case code == actuation.CodeNotFound || code == actuation.CodeNotRegularFile || code == actuation.CodeNotDirectory:
			return "", "changed-during-read", nil
		default:
			k.drop()
			return "", "", r.mapErr("read", rel, err)
		}
		if rd.Size != size {
			return "", "changed-during-read", nil
		}
		_, _ = d.Write(b) // a hash never fails
		off += int64(len(b))
		if rd.EOF {
			break
		}
		if len(b) == 0 {
			return "", "changed-during-read", nil // no progress: the file is being rewritten
		}
	}
	if off != size {
		return "", "changed-during-read", nil
	}
	return d.Digest(), "", nil
}

// Read returns up to maxBytes (default fsaccess.DefaultReadBytes, refused above
// fsaccess.MaxReadBytesHard) of the regular file rel from offset, like fsaccess's Read.
// The full-file digest is computed on the host from the bytes received (up to
// fsaccess.MaxReadDigestBytes).
func (r *Root) Read(ctx context.Context, rel string, offset int64, maxBytes int) (*fsaccess.ReadResult, error) {
	maxBytes, err := fsaccess.CheckRead(r.display(rel), rel, offset, maxBytes)
	if err != nil {
		return nil, err
	}
	var res *fsaccess.ReadResult
	err = r.with(ctx, func(ctx context.Context, k *channel) error {
		c, err := k.get(ctx)
		if err != nil {
			return err
		}
		d, b, err := c.ReadFile(ctx, "", protocol.ReadArgs{Path: r.guestPath(rel), Offset: uint64(offset), Max: uint64(maxBytes)})
		if err != nil {
			return r.mapErr("read", rel, err)
		}
		res = &fsaccess.ReadResult{Path: rel, Offset: offset, Size: d.Size, EOF: d.EOF}
		if len(b) > 0 {
			res.Data = b
		}
		switch {
		case d.Size > fsaccess.MaxReadDigestBytes:
			res.DigestOmitted = fsaccess.OmitOverFileCap
		case offset == 0 && int64(len(b)) == d.Size:
			res.Digest = fsaccess.DigestBytes(b)
		default:
			res.Digest, res.DigestOmitted, err = r.hash(ctx, k, rel, d.Size)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Exists reports whether rel exists beneath the root. The protocol has no lstat: a final
// symlink is resolved beneath the guest root, so a dangling one is absent. A parent that
// is not a directory counts as absent, as for a host root.
func (r *Root) Exists(ctx context.Context, rel string) (bool, string, error) {
	if err := fsaccess.CheckRel(rel, true); err != nil {
		return false, "", err
	}
	var (
		ok     bool
		detail string
	)
	err := r.with(ctx, func(ctx context.Context, k *channel) error {
		c, err := k.get(ctx)
		if err != nil {
			return err
		}
		_, _, err = c.ReadFile(ctx, "", protocol.ReadArgs{Path: r.guestPath(rel), Max: 1})
		switch guestclient.GuestCode(err) {
		case "":
			if err != nil {
				return r.mapErr("stat", rel, err)
			}
			ok, detail = true, "exists (file)"
		case actuation.CodeNotRegularFile:
			ok, detail = true, "exists (not a regular file)"
		case actuation.CodeNotFound, actuation.CodeNotDirectory:
			detail = "absent"
		default:
			return r.mapErr("stat", rel, err)
		}
		return nil
	})
	return ok, detail, err
}

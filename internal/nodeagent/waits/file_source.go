package waits

import (
	"errors"
	"io/fs"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

type fileSource struct {
	root    *fsaccess.Root
	rel     string
	notify  <-chan struct{}
	sub     *Subscription // set when the source owns a watch subscription
	release func()
}

// FileSource observes rel beneath root for file.exists and
// file.digest.changed. Every access goes through fsaccess (openat2 beneath
// the root; symlink escapes refuse). notify is the change signal (closed, or
// sent a value, at each change): normally a FileWatcher subscription's C;
// nil means the source never wakes the wait (it then ends at its deadline
// unless the first evaluation holds). FileWatcher.Source builds one with its
// own subscription.
func FileSource(root *fsaccess.Root, rel string, notify <-chan struct{}) Source {
	if root == nil {
		return nil
	}
	return &fileSource{root: root, rel: rel, notify: notify}
}

func (f *fileSource) Supports(kind string) bool {
	return kind == KindFileExists || kind == KindDigestChanged
}

func (f *fileSource) Changed() <-chan struct{} { return f.notify }

func (f *fileSource) Release() {
	if f.release != nil {
		f.release()
	}
}

func (f *fileSource) Observe(req *Request) (Observation, error) {
	if f.sub != nil {
		if err := f.sub.Err(); err != nil {
			return Observation{}, err
		}
	}
	if err := fsaccess.CheckRel(f.rel, true); err != nil {
		return Observation{}, err
	}
	now := time.Now()
	switch req.Kind {
	case KindFileExists:
		e, err := f.root.Lstat(f.rel)
		switch {
		case err == nil:
			return Observation{Satisfied: true, ObservedAt: now, Detail: "exists (" + string(e.Type) + ")"}, nil
		case absent(err):
			return Observation{ObservedAt: now, Detail: "absent"}, nil
		default:
			return Observation{}, err
		}
	case KindDigestChanged:
		digest, detail, err := f.digest()
		if err != nil {
			return Observation{}, err
		}
		obs := Observation{ObservedAt: now, Digest: digest, Detail: detail}
		if detail == "" {
			obs.Satisfied = digest != req.PrevDigest
			obs.Detail = "unchanged"
			if obs.Satisfied {
				obs.Detail = "changed"
			}
		}
		return obs, nil
	}
	return Observation{}, actuation.Refusef(actuation.CodeWaitScopeInvalid, "file source cannot evaluate %s", req.Kind)
}

// absent: the path or one of its parents does not exist (a parent that is a
// file counts as absent too).
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || actuation.CodeOf(err) == actuation.CodeNotDirectory
}

// digest returns the file's content digest ("" when absent). A file being
// written while hashed yields detail "changed-during-read" (no verdict; the
// next event re-evaluates); a file above fsaccess.MaxReadDigestBytes refuses
// file-too-large.
func (f *fileSource) digest() (digest, detail string, err error) {
	res, err := f.root.Read(f.rel, 0, 1)
	switch {
	case err == nil:
	case absent(err):
		return "", "", nil
	default:
		return "", "", err
	}
	switch res.DigestOmitted {
	case "":
		return res.Digest, "", nil
	case "over-file-cap":
		return "", "", actuation.Refusef(actuation.CodeFileTooLarge, "%q is %d bytes; digests stop at %d", f.rel, res.Size, fsaccess.MaxReadDigestBytes)
	default:
		return "", res.DigestOmitted, nil
	}
}

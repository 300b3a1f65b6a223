package waits

import (
	"context"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// filesProbeTimeout bounds one evaluation of a probe through fsaccess.Files (the engine's
// own timeout ends the probe earlier; this ends the request behind it, e.g. to a guest).
const filesProbeTimeout = 30 * time.Second

// FilesSource evaluates file.exists and file.digest.changed of rel once, through root's
// file-access interface: the probe source of a root with no host directory to watch (a
// root inside a VM guest, whose protocol has no change notifications). It never changes
// by itself: it serves probes, never waits.
func FilesSource(root fsaccess.Files, rel string) Source {
	return &filesSource{root: root, rel: rel}
}

type filesSource struct {
	root fsaccess.Files
	rel  string
}

func (g *filesSource) Supports(kind string) bool {
	return kind == KindFileExists || kind == KindDigestChanged
}

func (g *filesSource) Changed() <-chan struct{} { return nil }

func (g *filesSource) Observe(req *Request) (Observation, error) {
	if err := fsaccess.CheckRel(g.rel, true); err != nil {
		return Observation{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), filesProbeTimeout)
	defer cancel()
	switch req.Kind {
	case KindFileExists:
		ok, detail, err := g.root.Exists(ctx, g.rel)
		if err != nil {
			return Observation{}, err
		}
		return Observation{Satisfied: ok, ObservedAt: time.Now(), Detail: detail}, nil
	case KindDigestChanged:
		obs := Observation{}
		res, err := g.root.Read(ctx, g.rel, 0, 1)
		switch {
		case err == nil:
		case actuation.CodeOf(err) == actuation.CodePathNotFound || actuation.CodeOf(err) == actuation.CodeNotDirectory:
			res = &fsaccess.ReadResult{}
		default:
			return Observation{}, err
		}
		switch res.DigestOmitted {
		case "":
			obs.Digest = res.Digest
		case "over-file-cap":
			return Observation{}, actuation.Refusef(actuation.CodeFileTooLarge, "%q is %d bytes; digests stop at %d", g.rel, res.Size, fsaccess.MaxReadDigestBytes)
		default:
			obs.Detail = res.DigestOmitted
		}
		obs.ObservedAt = time.Now()
		if obs.Detail == "" {
			obs.Satisfied = obs.Digest != req.PrevDigest
			obs.Detail = "unchanged"
			if obs.Satisfied {
				obs.Detail = "changed"
			}
		}
		return obs, nil
	}
	return Observation{}, actuation.Refusef(actuation.CodeWaitScopeInvalid, "file source cannot evaluate %s", req.Kind)
}

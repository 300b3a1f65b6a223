package agent

import (
	"context"
	"io"
	"time"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/guestfs"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/waits"
	"sensorium.dev/workbench/internal/platform/fixture"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/patch"
)

// rootAccess is one environment root: a host directory (host-local, fixture-copy) or a
// directory inside the environment's VM guest (qemu-microvm.v1), reached through the guest
// protocol. Exactly one of host and guest is set; files() is the one file-access
// interface both satisfy.
type rootAccess struct {
	mr    backends.MountedRoot
	host  *fsaccess.Root
	guest *guestfs.Root
}

// files is the root's file access (fsaccess.Files), host or guest alike.
func (ra rootAccess) files() fsaccess.Files {
	if ra.guest != nil {
		return ra.guest
	}
	return fsaccess.Host(ra.host)
}

// rootFiles is the root's file access as the rooms see it (nodekit.RootFiles): the host
// directory or the guest directory behind one interface.
func (ra rootAccess) rootFiles() nodekit.RootFiles {
	if ra.guest != nil {
		return guestRootFiles{Root: ra.guest, name: ra.mr.Name}
	}
	if ra.host == nil {
		return nil
	}
	return hostRootFiles{Files: fsaccess.Host(ra.host), r: ra.host}
}

// hostRootFiles is a host root's nodekit.RootFiles: the pinned directory.
type hostRootFiles struct {
	fsaccess.Files
	r *fsaccess.Root
}

func (h hostRootFiles) ApplyPatch(_ context.Context, req patch.Request) (*patch.Result, error) {
	return patch.Apply(h.r, req)
}

func (h hostRootFiles) Export(_ context.Context, rel string, w io.Writer, lim fixture.Limits) (*fixture.ExportResult, error) {
	return fixture.ExportRoot(h.r, rel, w, lim)
}

func (h hostRootFiles) GitPatchRoot() (*fsaccess.Root, error) { return h.r, nil }

func (hostRootFiles) Origin() string { return "" }

// guestRootFiles is a guest root's nodekit.RootFiles: every operation over the guest
// protocol (guestfs).
type guestRootFiles struct {
	*guestfs.Root
	name string
}

func (g guestRootFiles) GitPatchRoot() (*fsaccess.Root, error) {
	return nil, actuation.Refusef(actuation.CodeExportInvalid, "root %s lives in a VM guest; git-patch exports read host roots only (export it as tar)", g.name)
}

func (guestRootFiles) Origin() string { return "the guest" }

// errGuestFileWaits refuses file waits on VM roots: the guest protocol has no change
// notifications, and a wait never polls.
var errGuestFileWaits = actuation.Refusef(actuation.CodeCapabilityMismatch,
	"file waits on VM environments are not available: the guest protocol has no change notifications")

// openRootAccess opens a mounted root of env: its host directory, or its directory inside
// the guest of env's VM backend (the guest Env of the backends port: each guest operation
// opens its own channel through the backend's host broker, which pins the endpoint and
// binding of the running boot).
func (a *Agent) openRootAccess(env *wbv1.Environment, mr backends.MountedRoot) (rootAccess, error) {
	if mr.Path != "" {
		r, err := a.pinnedRootOf(string(env.UID), mr.Name)
		return rootAccess{mr: mr, host: r}, err
	}
	g := a.guestEnvOf(env)
	if g == nil || mr.GuestDir == "" {
		return rootAccess{mr: mr}, actuation.Refusef(actuation.CodeCapabilityMismatch, "backend %s offers no file access to root %s", env.Spec.Backend, mr.Name)
	}
	gr, err := guestfs.New(g.Dial, mr.GuestDir)
	if err != nil {
		return rootAccess{mr: mr}, actuation.Refusef(actuation.CodeRootInvalid, "root %s: %v", mr.Name, err)
	}
	return rootAccess{mr: mr, guest: gr}, nil
}

// guestProbeTimeout bounds one evaluation of a probe on a VM root (the engine's own timeout
// ends the probe earlier; this ends the guest request behind it).
const guestProbeTimeout = 30 * time.Second

// guestFileSource evaluates file.exists and file.digest.changed once, through the guest.
// It never changes by itself: it serves probes, never waits.
type guestFileSource struct {
	root fsaccess.Files
	rel  string
}

func (g *guestFileSource) Supports(kind string) bool {
	return kind == waits.KindFileExists || kind == waits.KindDigestChanged
}

func (g *guestFileSource) Changed() <-chan struct{} { return nil }

func (g *guestFileSource) Observe(req *waits.Request) (waits.Observation, error) {
	if err := fsaccess.CheckRel(g.rel, true); err != nil {
		return waits.Observation{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), guestProbeTimeout)
	defer cancel()
	switch req.Kind {
	case waits.KindFileExists:
		ok, detail, err := g.root.Exists(ctx, g.rel)
		if err != nil {
			return waits.Observation{}, err
		}
		return waits.Observation{Satisfied: ok, ObservedAt: time.Now(), Detail: detail}, nil
	case waits.KindDigestChanged:
		obs := waits.Observation{}
		res, err := g.root.Read(ctx, g.rel, 0, 1)
		switch {
		case err == nil:
		case actuation.CodeOf(err) == actuation.CodePathNotFound || actuation.CodeOf(err) == actuation.CodeNotDirectory:
			res = &fsaccess.ReadResult{}
		default:
			return waits.Observation{}, err
		}
		switch res.DigestOmitted {
		case "":
			obs.Digest = res.Digest
		case "over-file-cap":
			return waits.Observation{}, actuation.Refusef(actuation.CodeFileTooLarge, "%q is %d bytes; digests stop at %d", g.rel, res.Size, fsaccess.MaxReadDigestBytes)
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
	return waits.Observation{}, actuation.Refusef(actuation.CodeWaitScopeInvalid, "file source cannot evaluate %s", req.Kind)
}

// guestPatchTimeout bounds a FilePatch applied inside a guest (planning reads, stages,
// applies and a rollback, each operation also bounded by guestfs.OpTimeout).
const guestPatchTimeout = 5 * time.Minute

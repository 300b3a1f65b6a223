package environments

import (
	"context"
	"errors"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/store"
)

// Host-root tenancy at the node (issue 25 item 4). The Environment webhook refuses a
// second Environment over the same host tree by its spec paths, but admission is not
// transactional (two creates can both pass it) and it cannot resolve this node's symlinks
// (a link to a bound directory is another string). The node's own table is the guard: every
// host-local environment's record in the store carries the symlink-resolved directories it
// binds (store.Environment.HostClaims), and a pass claims them with store.ClaimEnvironment —
// one bbolt transaction that checks every other record and writes this one — before the
// backend allocates anything, and again with the directories the backend actually admitted
// before they are pinned. The table survives agent restarts (the store), and a record is
// deleted only by teardown or by the recovery sweep of an Environment that no longer exists,
// which is what frees the directories.

// hostClaimsOf resolves the host directories of spec's roots now. A root that cannot be
// resolved claims its path as written (the backend refuses it anyway, and a claim that is too
// broad only refuses).
func hostClaimsOf(spec backends.Spec) []actuation.HostClaim {
	var out []actuation.HostClaim
	for _, r := range spec.Roots {
		if r.HostPath == "" {
			continue
		}
		p := filepath.Clean(r.HostPath)
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			p = resolved
		}
		out = append(out, actuation.HostClaim{Holder: spec.ID, Ref: spec.Ref, Root: r.Name, Path: p, ReadOnly: r.ReadOnly})
	}
	return out
}

// mountedClaims are the claims of the directories a backend admitted (resolved by it).
func mountedClaims(spec backends.Spec, roots []backends.MountedRoot) []actuation.HostClaim {
	var out []actuation.HostClaim
	for _, mr := range roots {
		if mr.Path == "" {
			continue
		}
		out = append(out, actuation.HostClaim{Holder: spec.ID, Ref: spec.Ref, Root: mr.Name, Path: mr.Path, ReadOnly: mr.ReadOnly})
	}
	return out
}

// mergeClaims is old plus every claim of add not already in it (same root and directory): a
// directory an environment bound stays claimed until its record is deleted.
func mergeClaims(old, add []actuation.HostClaim) []actuation.HostClaim {
	out := append([]actuation.HostClaim(nil), old...)
	for _, c := range add {
		found := false
		for _, o := range out {
			if o.Root == c.Root && o.Path == c.Path && o.ReadOnly == c.ReadOnly {
				found = true
				break
			}
		}
		if !found {
			out = append(out, c)
		}
	}
	return out
}

// heldClaims are the claims of the other environments' records. A record written before
// records carried claims (an older agent) claims its root paths as resolved now, read-write.
func heldClaims(others []store.Environment) []actuation.HostClaim {
	var held []actuation.HostClaim
	for _, o := range others {
		if len(o.HostClaims) > 0 {
			held = append(held, o.HostClaims...)
			continue
		}
		for name, p := range o.RootPaths {
			if p == "" {
				continue
			}
			if resolved, err := filepath.EvalSymlinks(p); err == nil {
				p = resolved
			}
			held = append(held, actuation.HostClaim{Holder: o.UID, Ref: o.Namespace + "/" + o.Name, Root: name, Path: p})
		}
	}
	return held
}

// claimHostRoots writes rec only if none of its claims overlaps a directory another
// environment's record holds (under the node's sharing policy); otherwise it writes nothing
// and returns a root-in-use refusal.
func (a *Room) claimHostRoots(rec store.Environment) error {
	return a.d.Store.ClaimEnvironment(rec, func(others []store.Environment) error {
		if r := actuation.CheckHostTenancy(rec.HostClaims, heldClaims(others), a.d.RootSharing); r != nil {
			return actuation.Refusef(actuation.Code(string(r.Code)), "environment %s: node %s: %s", rec.Namespace+"/"+rec.Name, a.d.NodeName, r.Message)
		}
		return nil
	})
}

// wakeRootWaiters re-queues this node's environments refused with root-in-use: a teardown
// just freed host directories, and their next pass claims them again.
func (a *Room) wakeRootWaiters(ctx context.Context) {
	var list wbv1.EnvironmentList
	if err := a.d.Client.List(ctx, &list, client.MatchingLabels{wbv1.NodeLabel: a.d.NodeName}); err != nil {
		return
	}
	for i := range list.Items {
		e := &list.Items[i]
		if c := meta.FindStatusCondition(e.Status.Conditions, wbv1.ConditionReady); c != nil &&
			strings.HasPrefix(c.Message, string(actuation.CodeRootInUse)+":") && e.DeletionTimestamp.IsZero() {
			nodekit.Wake(a.d.Ctx, a.d.Wake, e)
		}
	}
}

// claim is claimOrRefuse for a pass: a root another environment holds fails the pass
// (RootInUse) and claimed is false, as it is with a (retried) error.
func (a *Room) claim(p *pass, rec store.Environment) (claimed bool, err error) {
	code, msg, err := a.claimOrRefuse(rec)
	if err != nil {
		return false, err
	}
	if code != "" {
		a.failed(p, "RootInUse", msg)
		return false, nil
	}
	return true, nil
}

// claimOrRefuse claims rec's host directories (claimHostRoots) and turns a root-in-use
// refusal into its code and a condition message that starts with the code; other errors
// are returned (the pass is retried).
func (a *Room) claimOrRefuse(rec store.Environment) (code, msg string, err error) {
	err = a.claimHostRoots(rec)
	var rf *actuation.Refusal
	if errors.As(err, &rf) {
		return string(rf.Code), string(rf.Code) + ": " + rf.Message, nil
	}
	return "", "", err
}

package environments

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/spans"
)

// adoptPoolMember moves the backend instance of the pool member env claimed
// (status.poolMember, set by the manager) to env before env is allocated: the member's
// sessions and commands are stopped, the instance is re-keyed to env's UID by the backend,
// and the member's live state is dropped, so nothing answers to the member any more and its
// later deletion finds nothing to tear down. It returns the member's UID when it moved the
// instance: the caller replaces the member's store record by env's in one transaction once
// env is allocated (store Replace). A crash before that leaves the member's record and no
// record of env: the next pass adopts again (a backend's Adopt of a move already done
// succeeds, or fails and env is allocated afresh) and the member's own teardown finds
// nothing of the moved instance. The claimer's source generation advances past the
// member's. When the instance cannot be adopted (no record here, a backend without Adopter,
// a failed move) env is allocated afresh, which is always correct: its allocation equals the
// member's, and the member's own teardown removes the instance left behind.
func (a *Room) adoptPoolMember(ctx context.Context, env *wbv1.Environment, b backends.Backend, spec *backends.Spec) (string, error) {
	pm := env.Status.PoolMember
	if pm == nil || pm.UID == "" || pm.UID == spec.ID {
		return "", nil
	}
	logger := ctrl.LoggerFrom(ctx).WithValues("environment", env.Namespace+"/"+env.Name, "member", pm.Name)
	// Every pass, not only the adopting one: a pass after an adoption whose status write
	// failed must still report a generation past the member's.
	spec.Generation = max(spec.Generation, pm.SourceGeneration+1)
	if _, found, err := a.d.Store.Environments().Get(spec.ID); err != nil {
		return "", fmt.Errorf("reading the store record of environment %s/%s: %w", env.Namespace, env.Name, err)
	} else if found {
		return "", nil // adopted (or allocated) by an earlier pass
	}
	ad, ok := b.(backends.Adopter)
	if !ok {
		logger.V(1).Info("Backend cannot adopt a pool member; allocating afresh", "backend", b.ID())
		return "", nil
	}
	mrec, found, err := a.d.Store.Environments().Get(pm.UID)
	if err != nil {
		return "", fmt.Errorf("reading the store record of pool member %s/%s: %w", env.Namespace, pm.Name, err)
	}
	if !found || mrec.Namespace != env.Namespace || mrec.Backend != b.ID() {
		logger.Info("Pool member holds no instance on this node; allocating afresh")
		return "", nil
	}
	mark := claimMarker(env)
	mark("node-adopt-begin")
	a.d.Drain(ctx, pm.UID)
	mark("node-member-drained")
	if err := ad.Adopt(ctx, SpecFromRecord(mrec), *spec); err != nil {
		logger.Info("Adopting the pool member failed; allocating afresh", "error", err.Error())
		return "", nil
	}
	mark("node-instance-moved")
	a.forgetEnv(pm.UID)
	a.d.Event(env, "Normal", "PoolMemberAdopted", "adopted the instance of pool member "+pm.Name+" on node "+a.d.NodeName)
	return pm.UID, nil
}

// poolClaimPending reports whether env is a pool claimer this node must not act for yet:
// its status names a member (status.poolMember, not env itself) that this node's cache does
// not show claimed by env's UID, and env has no store record here (an adopted or allocated
// claimer has one; its member may be deleted since). The manager writes the claim of the
// member and env's binding at the same time (controllers/environmentpool_claim.go), so a
// binding can name a member whose claim another claimer won: such a claim never shows (a
// claimed-by label is written once), nothing is moved or allocated for env, and the manager
// binds env anew. A claim the cache has not seen yet shows with the member's next event,
// which requeues env (claimerOfMember).
func (a *Room) poolClaimPending(ctx context.Context, env *wbv1.Environment) (bool, error) {
	pm := env.Status.PoolMember
	if pm == nil || pm.UID == string(env.UID) {
		return false, nil
	}
	if _, found, err := a.d.Store.Environments().Get(string(env.UID)); err != nil {
		return false, fmt.Errorf("reading the store record of environment %s/%s: %w", env.Namespace, env.Name, err)
	} else if found {
		return false, nil
	}
	var m wbv1.Environment
	if err := a.d.Client.Get(ctx, types.NamespacedName{Namespace: env.Namespace, Name: pm.Name}, &m); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("reading pool member %s/%s of environment %s: %w", env.Namespace, pm.Name, env.Name, err)
	}
	return string(m.UID) != pm.UID || m.Labels[wbv1.PoolClaimedByLabel] != string(env.UID), nil
}

// claimerOfMember maps a claimed pool member to its claimer, so a claimer whose binding
// arrived before its member's claim (poolClaimPending) is reconciled when the claim shows.
func claimerOfMember(_ context.Context, o client.Object) []reconcile.Request {
	if o.GetLabels()[wbv1.PoolClaimedByLabel] == "" {
		return nil
	}
	name := o.GetAnnotations()[wbv1.PoolClaimedByAnnotation]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// claimMarker marks steps of a pool claimer's path for the benchmarks' span breakdown
// (internal/platform/spans, key namespace/name); a no-op unless a recorder is installed.
func claimMarker(env *wbv1.Environment) func(step string) {
	if !spans.Enabled() || env.Spec.PoolRef == nil {
		return func(string) {}
	}
	return spans.Marker(env.Namespace + "/" + env.Name)
}

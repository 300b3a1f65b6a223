package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
	"sensorium.dev/workbench/internal/platform/spans"
)

// The claim of a pool member is decided here, in the manager's Environment controller, and
// nowhere else (docs/pools.md): a webhook cannot know the claimer's UID and would hand out a
// member for an object whose creation may still fail, and this controller is already the one
// placement hop an Environment takes, so a claim adds no hop of its own.

// allocation is the part of an Environment spec that a backend instance embodies; a claimer
// may adopt a member only if theirs are equal.
type allocation struct {
	Backend      wbv1.BackendID
	Requirements *wbv1.EnvironmentRequirements
	Roots        []wbv1.EnvironmentRoot
	Resources    *wbv1.EnvironmentResources
	ImageRef     *string
}

func allocationOf(s *wbv1.EnvironmentSpec) allocation {
	return allocation{Backend: s.Backend, Requirements: s.Requirements, Roots: allocationRoots(s.Roots), Resources: s.Resources, ImageRef: s.ImageRef}
}

// sameAllocation reports whether two specs describe the same backend instance, sourced
// roots' versions aside (sourceVersionsMatch, environmentpool_sources.go).
func sameAllocation(a, b *wbv1.EnvironmentSpec) bool {
	return equality.Semantic.DeepEqual(allocationOf(a), allocationOf(b))
}

// claim binds env to a Ready member of its pool. done reports that placement is decided
// (claimed, or refused with a code); !done means no member could be had and env is placed
// normally.
func (r *EnvironmentReconciler) claim(ctx context.Context, env *wbv1.Environment, cur, next *wbv1.EnvironmentStatus, all *[]metav1.Condition) (bool, error) {
	logger := log.FromContext(ctx)
	poolName := env.Spec.PoolRef.Name
	var pool wbv1.EnvironmentPool
	if err := r.Get(ctx, types.NamespacedName{Namespace: env.Namespace, Name: poolName}, &pool); err != nil {
		if !kerrors.IsNotFound(err) {
			return false, fmt.Errorf("reading EnvironmentPool %s/%s of Environment %s: %w", env.Namespace, poolName, env.Name, err)
		}
		setCondition(&next.Conditions, all, cond(wbv1.ConditionScheduled, false, wbv1.ReasonNoMatch,
			fmt.Sprintf("%s: EnvironmentPool %s does not exist in namespace %s", actuation.CodePoolNotFound, poolName, env.Namespace), env.Generation))
		lostBinding(env, next)
		return true, nil
	}
	if !sameAllocation(&env.Spec, &pool.Spec.Template) || !sourceVersionsMatch(&env.Spec, &pool.Spec.Template, nil, false) {
		setCondition(&next.Conditions, all, cond(wbv1.ConditionScheduled, false, wbv1.ReasonNoMatch,
			fmt.Sprintf("%s: backend, requirements, roots, resources and imageRef must equal those of EnvironmentPool %s's template",
				actuation.CodePoolTemplateMismatch, poolName), env.Generation))
		lostBinding(env, next)
		return true, nil
	}
	var members wbv1.EnvironmentList
	if err := r.List(ctx, &members, client.InNamespace(env.Namespace), client.MatchingLabels{wbv1.PoolLabel: poolName}); err != nil {
		return false, fmt.Errorf("listing members of EnvironmentPool %s/%s: %w", env.Namespace, poolName, err)
	}
	// A member this environment already claimed (an earlier pass stopped between the claim
	// and the bind): finish that claim.
	for i := range members.Items {
		m := &members.Items[i]
		if m.Labels[wbv1.PoolClaimedByLabel] == string(env.UID) {
			done, err := r.bindMember(ctx, env, m, next, all)
			if err == nil && !done {
				lostBinding(env, next)
			}
			return done, err
		}
	}
	candidates := make([]*wbv1.Environment, 0, len(members.Items))
	for i := range members.Items {
		m := &members.Items[i]
		if m.Labels[wbv1.PoolClaimedByLabel] != "" || !m.DeletionTimestamp.IsZero() || m.Status.Phase != wbv1.EnvironmentReady ||
			m.Status.NodeName == "" || m.Status.PoolMember != nil || !sameAllocation(&m.Spec, &env.Spec) ||
			!sourceVersionsMatch(&env.Spec, &m.Spec, m.Status.Roots, true) {
			continue
		}
		candidates = append(candidates, m)
	}
	slices.SortFunc(candidates, func(a, b *wbv1.Environment) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, m := range candidates {
		c, ok, err := r.memberCapability(ctx, env, m)
		if err != nil {
			return false, err
		}
		if !ok {
			continue
		}
		won, err := r.claimAndBind(ctx, env, m, c, cur, next, all)
		if err != nil {
			return false, err
		}
		if !won {
			logger.V(1).Info("Pool member taken meanwhile; trying the next", "member", m.Name, "claimer", env.Name)
			continue
		}
		poolClaims.WithLabelValues("claimed").Inc()
		r.Recorder.Eventf(env, m, "Normal", "PoolClaimed", "Claim", "Adopted member %s of EnvironmentPool %s", m.Name, poolName)
		return true, nil
	}
	lostBinding(env, next)
	poolClaims.WithLabelValues("empty").Inc()
	r.Recorder.Eventf(env, &pool, "Normal", "PoolEmpty", "Claim", "EnvironmentPool %s has no Ready member; allocating normally", poolName)
	return false, nil
}

// memberCapability returns the capability m was placed by, if env may be placed by it too.
func (r *EnvironmentReconciler) memberCapability(ctx context.Context, env, m *wbv1.Environment) (*wbv1.BackendCapability, bool, error) {
	var c wbv1.BackendCapability
	if err := r.Get(ctx, types.NamespacedName{Name: m.Status.CapabilityRef}, &c); err != nil {
		if kerrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("reading BackendCapability %s of pool member %s/%s: %w", m.Status.CapabilityRef, m.Namespace, m.Name, err)
	}
	if c.Spec.NodeName != m.Status.NodeName || !labels.SelectorFromSet(env.Spec.NodeSelector).Matches(labels.Set(c.Labels)) {
		return nil, false, nil
	}
	ok, _ := actuation.Match(convert.Requirement(&env.Spec), convert.Capability(&c.Spec), nil)
	return &c, ok, nil
}

// claimAndBind claims member m for env and writes env's binding to m's node — the node
// label, and the status naming m (status.poolMember) — in the same moment: three writes of
// two objects at once instead of the claim and then the binding. won is false when another
// claimer took m (the claim's optimistic lock lost) or m is gone. The binding may then have
// been written naming a member env does not hold; that is safe because a node adopts (or
// allocates anything for) a claimer only once its cache shows the member claimed by the
// claimer's UID (the node agent's poolClaimPending), which a lost claim never is: the claimed-by
// label is written once and never changed. The next member's binding — or, with none left,
// lostBinding's — replaces it; status.poolMember is rewritten, never removed. cur is
// updated to the status written, so the caller's final apply writes only what changed after.
func (r *EnvironmentReconciler) claimAndBind(ctx context.Context, env, m *wbv1.Environment, c *wbv1.BackendCapability,
	cur, next *wbv1.EnvironmentStatus, all *[]metav1.Condition) (bool, error) {
	poolName := env.Spec.PoolRef.Name
	node := c.Spec.NodeName
	if err := r.bindStatus(env, c, next, all); err != nil {
		return false, err
	}
	next.PoolMember = &wbv1.PoolMemberStatus{Name: m.Name, UID: string(m.UID), SourceGeneration: m.Status.SourceGeneration}
	bound := bindingStatus(env, next, all)

	labelled := make(chan error, 1)
	if env.Labels[wbv1.NodeLabel] != node {
		cp := env.DeepCopy()
		go func() { labelled <- r.labelNode(ctx, cp, node) }()
	} else {
		labelled <- nil
	}
	written := make(chan error, 1)
	wc, cp := *cur, env.DeepCopy()
	mark := claimMarker(env)
	mark("mgr-claim-writes")
	go func() {
		_, err := applyStatus(ctx, r.Client, "environment", cp, wc, bound)
		if err == nil {
			mark("mgr-status-bound")
		}
		written <- err
	}()
	// The claim: one write of the member, held to the version read. Two claimers racing
	// for one member both write from the same version; the API server accepts one and
	// answers the other with a conflict, and that one tries the next member.
	orig := m.DeepCopy()
	m.Labels[wbv1.PoolClaimedByLabel] = string(env.UID)
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[wbv1.PoolClaimedByAnnotation] = env.Name
	m.OwnerReferences = slices.DeleteFunc(m.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "EnvironmentPool" })
	cerr := r.Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if cerr == nil {
		mark("mgr-member-claimed")
	}
	lerr, serr := <-labelled, <-written
	if lerr == nil {
		if env.Labels == nil {
			env.Labels = map[string]string{}
		}
		env.Labels[wbv1.NodeLabel] = node
	}
	if serr == nil {
		*cur = bound
		*next = *bound.DeepCopy() // the caller's final apply then writes only what changed after
	}
	if cerr != nil && kerrors.IsConflict(cerr) && r.APIReader != nil {
		// A pass whose cache had not seen this claimer's own earlier claim of m loses to
		// it: that is not a lost claim (claiming the next member too would hold two).
		var fresh wbv1.Environment
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), &fresh); err == nil &&
			fresh.UID == m.UID && fresh.Labels[wbv1.PoolClaimedByLabel] == string(env.UID) {
			cerr = nil
		}
	}
	switch {
	case cerr != nil && (kerrors.IsConflict(cerr) || kerrors.IsNotFound(cerr)):
		return false, nil
	case cerr != nil:
		return false, fmt.Errorf("claiming member %s of EnvironmentPool %s/%s for %s: %w", m.Name, env.Namespace, poolName, env.Name, cerr)
	case lerr != nil:
		return false, lerr // claimed: the next pass finds its own claim and binds it
	case serr != nil:
		return false, serr
	}
	r.Recorder.Eventf(env, c, "Normal", "Scheduled", "Place", "Placed on node %s", node)
	return true, nil
}

// bindingStatus is the status the manager's binding write leaves: next as the Reconcile's
// final apply would write it for a pool claimer (observed generation; no phase — its node
// writes it, wbv1.EnvironmentPhaseWriter — and Reconciling=True until the node's first
// write, claimerHealth).
func bindingStatus(env *wbv1.Environment, next *wbv1.EnvironmentStatus, all *[]metav1.Condition) wbv1.EnvironmentStatus {
	out := *next.DeepCopy()
	out.ObservedGeneration = env.Generation
	claimerHealth(env, &out, all)
	return out
}

// lostBinding turns a binding naming a member env did not get into "no member": the claim
// decided nothing for env, which is placed normally. status.poolMember is never removed
// (its node keeps writing env's phase, wbv1.EnvironmentPhaseWriter); it names env itself,
// which its node reads as "allocate afresh".
func lostBinding(env *wbv1.Environment, next *wbv1.EnvironmentStatus) {
	if pm := next.PoolMember; pm != nil && pm.UID != string(env.UID) {
		next.PoolMember = &wbv1.PoolMemberStatus{Name: env.Name, UID: string(env.UID)}
	}
}

// claimLost reports whether env's binding names a member it does not hold, before its node
// acted on it (no Ready condition, no source generation): the member is claimed by another
// Environment, gone, or not claimed (env's claim never landed). The cache is asked first;
// only when it does not show the claim is the API server asked, so a claim the cache has
// not seen yet is not taken for lost.
func (r *EnvironmentReconciler) claimLost(ctx context.Context, env *wbv1.Environment) (bool, error) {
	pm := env.Status.PoolMember
	if pm == nil || pm.UID == string(env.UID) || env.Status.SourceGeneration != 0 ||
		meta.FindStatusCondition(env.Status.Conditions, wbv1.ConditionReady) != nil || !env.DeletionTimestamp.IsZero() {
		return false, nil
	}
	holds := func(m *wbv1.Environment) bool {
		return string(m.UID) == pm.UID && m.Labels[wbv1.PoolClaimedByLabel] == string(env.UID)
	}
	key := types.NamespacedName{Namespace: env.Namespace, Name: pm.Name}
	var m wbv1.Environment
	if err := r.Get(ctx, key, &m); err == nil && holds(&m) {
		return false, nil
	}
	if r.APIReader == nil {
		return false, nil
	}
	if err := r.APIReader.Get(ctx, key, &m); err != nil {
		if kerrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("reading pool member %s of Environment %s/%s: %w", key, env.Namespace, env.Name, err)
	}
	return !holds(&m), nil
}

// bindMember binds env to the node of its claimed member m and records the member, whose
// backend instance the node agent then moves to env.
func (r *EnvironmentReconciler) bindMember(ctx context.Context, env, m *wbv1.Environment, next *wbv1.EnvironmentStatus, all *[]metav1.Condition) (bool, error) {
	c, ok, err := r.memberCapability(ctx, env, m)
	if err != nil {
		return false, err
	} else if !ok {
		// The member's capability is gone or no longer fits: it stays claimed (its pool
		// deletes it) and env is placed normally.
		return false, nil
	}
	if err := r.bind(ctx, env, c, next, all); err != nil {
		return false, err
	}
	next.PoolMember = &wbv1.PoolMemberStatus{Name: m.Name, UID: string(m.UID), SourceGeneration: m.Status.SourceGeneration}
	return true, nil
}

// claimMarker marks steps of a pool claimer's create → Ready path for the benchmarks' span
// breakdown (internal/platform/spans, key namespace/name); it does nothing unless a
// recorder is installed or for an Environment without spec.poolRef.
func claimMarker(env *wbv1.Environment) func(step string) {
	if !spans.Enabled() || env.Spec.PoolRef == nil {
		return func(string) {}
	}
	return spans.Marker(env.Namespace + "/" + env.Name)
}

package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// EnvironmentReconciler places Environments: their requirements are matched conjunctively
// against host-attested BackendCapability objects; the first match (by name) binds the
// environment to its node. It also expires environments past their TTL.
type EnvironmentReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Now      func() time.Time
	// APIReader reads a pool claimer's member from the API server when the cache does not
	// show the claimer's claim (claimLost); nil: the cache is trusted.
	APIReader client.Reader
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=environments,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=environments/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=backendcapabilities;workbenchnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// environmentOwned is the status projection this controller owns: placement, expiry and —
// while the manager is their writer (wbv1.EnvironmentPhaseWriter: not for a pool claimer,
// whose node writes them) — the phase and health conditions.
func environmentOwned(s *wbv1.EnvironmentStatus) wbv1.EnvironmentStatus {
	out := wbv1.EnvironmentStatus{
		Phase: s.Phase, NodeName: s.NodeName, PlanDigest: s.PlanDigest, CapabilityRef: s.CapabilityRef,
		EffectiveOperationalContext: s.EffectiveOperationalContext, Unmet: s.Unmet, ObservedGeneration: s.ObservedGeneration, PoolMember: s.PoolMember,
		Conditions: ownedConditions(s.Conditions, wbv1.ConditionScheduled, wbv1.ConditionExpired, wbv1.ConditionReconciling, wbv1.ConditionStalled),
	}
	if wbv1.EnvironmentPhaseWriter(s) == wbv1.PhaseWriterNode {
		out.Phase = ""
		out.Conditions = ownedConditions(s.Conditions, wbv1.ConditionScheduled, wbv1.ConditionExpired)
		if wbv1.EnvironmentAwaitsNode(s) {
			out.Conditions = append(out.Conditions, ownedConditions(s.Conditions, wbv1.ConditionReconciling, wbv1.ConditionStalled)...)
		}
	}
	return out
}

// claimerHealth leaves in next the conditions the manager writes for a pool claimer (its
// node writes the phase): Scheduled and Expired, and — until its node's first write
// (wbv1.EnvironmentAwaitsNode) — Reconciling=True, Stalled=False.
func claimerHealth(env *wbv1.Environment, next *wbv1.EnvironmentStatus, all *[]metav1.Condition) {
	next.Phase = ""
	if !wbv1.EnvironmentAwaitsNode(&wbv1.EnvironmentStatus{PoolMember: next.PoolMember, Conditions: *all}) {
		next.Conditions = ownedConditions(next.Conditions, wbv1.ConditionScheduled, wbv1.ConditionExpired)
	} else {
		// Kept, then set: an unchanged condition keeps its transition time (a new one
		// would make every pass write).
		next.Conditions = ownedConditions(next.Conditions, wbv1.ConditionScheduled, wbv1.ConditionExpired,
			wbv1.ConditionReconciling, wbv1.ConditionStalled)
		for _, hc := range wbv1.HealthConditions(wbv1.HealthProgressing, string(wbv1.EnvironmentAllocating),
			"bound to pool member "+next.PoolMember.Name+"; its node adopts the member's instance", env.Generation) {
			setCondition(&next.Conditions, all, hc)
		}
	}
}

// Reconcile implements reconcile.Reconciler.
func (r *EnvironmentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var env wbv1.Environment
	if err := r.Get(ctx, req.NamespacedName, &env); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	mark := claimMarker(&env)
	mark("mgr-reconcile")
	cur := environmentOwned(&env.Status)
	next := environmentOwned(&env.Status)
	all := append([]metav1.Condition(nil), env.Status.Conditions...)
	gen := env.Generation
	var result ctrl.Result

	lost, err := r.claimLost(ctx, &env)
	if err != nil {
		return ctrl.Result{}, err
	}
	if next.NodeName == "" || lost {
		// lost: the binding was written beside a claim that another claimer won (or that
		// never landed), and the node has not acted on it: claim again (claimAndBind).
		if err := r.place(ctx, &env, &cur, &next, &all); err != nil {
			return ctrl.Result{}, err
		}
	} else if sc := meta.FindStatusCondition(env.Status.Conditions, wbv1.ConditionScheduled); sc != nil && sc.ObservedGeneration < gen &&
		env.DeletionTimestamp.IsZero() {
		// The spec changed since the plan was made (e.g. its operational context rose):
		// re-plan on the selected capability.
		if err := r.replan(ctx, &env, &next, &all); err != nil {
			return ctrl.Result{}, err
		}
	}
	if env.Spec.TTLSeconds != nil {
		expiry := env.CreationTimestamp.Add(time.Duration(*env.Spec.TTLSeconds) * time.Second)
		if now := r.Now(); now.Before(expiry) {
			result.RequeueAfter = requeueAt(now, expiry)
		} else {
			setCondition(&next.Conditions, &all, cond(wbv1.ConditionExpired, true, wbv1.ReasonExpired, "the environment's TTL passed", gen))
		}
	}
	next.ObservedGeneration = gen
	// The phase and health, derived from every component's conditions, while this
	// controller is their one writer (wbv1.EnvironmentPhaseWriter over the status this
	// write leaves: a write binding a pool claimer hands them to the node, and carries none).
	if wbv1.EnvironmentPhaseWriter(&next) == wbv1.PhaseWriterManager {
		next.Phase = wbv1.EnvironmentPhaseFor(all, !env.DeletionTimestamp.IsZero())
		for _, hc := range wbv1.HealthConditions(wbv1.EnvironmentHealth(next.Phase), string(next.Phase), "environment is "+string(next.Phase), gen) {
			setCondition(&next.Conditions, &all, hc)
		}
	} else {
		claimerHealth(&env, &next, &all)
	}
	wrote, err := applyStatus(ctx, r.Client, "environment", &env, cur, next)
	if err != nil {
		mark("mgr-status-error")
		return ctrl.Result{}, err
	}
	if wrote && next.Phase == "" {
		mark("mgr-status-bound") // a pool claimer: its node writes the phase
	} else if wrote {
		mark("mgr-status-" + string(next.Phase))
	}
	if wrote && next.Phase != "" && cur.Phase != next.Phase {
		phaseTransitions.WithLabelValues("Environment", string(next.Phase)).Inc()
		r.Recorder.Eventf(&env, nil, corev1.EventTypeNormal, "Phase"+string(next.Phase), "Reconcile", "Environment is %s", next.Phase)
	}
	return result, nil
}

// place picks a capability and binds the environment to its node: the node label first,
// then the status, so a crash in between is completed by the next pass.
func (r *EnvironmentReconciler) place(ctx context.Context, env *wbv1.Environment, cur, next *wbv1.EnvironmentStatus, all *[]metav1.Condition) error {
	logger := log.FromContext(ctx)
	if env.Spec.PoolRef != nil && env.DeletionTimestamp.IsZero() {
		if done, err := r.claim(ctx, env, cur, next, all); err != nil || done {
			return err // claimed a pool member, or refused with a pool code
		}
	}
	var caps wbv1.BackendCapabilityList
	if err := r.List(ctx, &caps); err != nil {
		return fmt.Errorf("listing BackendCapabilities: %w", err)
	}
	slices.SortFunc(caps.Items, func(a, b wbv1.BackendCapability) int { return strings.Compare(a.Name, b.Name) })
	req := convert.Requirement(&env.Spec)
	selector := labels.SelectorFromSet(env.Spec.NodeSelector)
	var best []actuation.Unmet
	candidates := 0
	for i := range caps.Items {
		c := &caps.Items[i]
		if !selector.Matches(labels.Set(c.Labels)) {
			continue
		}
		candidates++
		ok, unmet := actuation.Match(req, convert.Capability(&c.Spec), nil)
		if !ok {
			if best == nil || len(unmet) < len(best) {
				best = unmet
			}
			continue
		}
		return r.bind(ctx, env, c, next, all)
	}
	next.Unmet = nil
	msg := fmt.Sprintf("%s: no BackendCapability matches backend %s", actuation.CodeCapabilityMismatch, env.Spec.Backend)
	if candidates > 0 && len(best) > 0 {
		parts := make([]string, 0, len(best))
		for _, u := range best {
			next.Unmet = append(next.Unmet, wbv1.UnmetRequirement{Dimension: string(u.Dimension), Want: u.Want})
			parts = append(parts, fmt.Sprintf("%s=%s (have %s)", u.Dimension, u.Want, strings.Join(u.Have, ",")))
		}
		if len(next.Unmet) > 32 {
			next.Unmet = next.Unmet[:32]
		}
		msg = fmt.Sprintf("%s: unmet %s", actuation.CodeCapabilityMismatch, strings.Join(parts, "; "))
	}
	logger.V(1).Info("No capability matches", "environment", client.ObjectKeyFromObject(env), "message", msg)
	setCondition(&next.Conditions, all, cond(wbv1.ConditionScheduled, false, wbv1.ReasonNoMatch, msg, env.Generation))
	return nil
}

func (r *EnvironmentReconciler) bind(ctx context.Context, env *wbv1.Environment, c *wbv1.BackendCapability, next *wbv1.EnvironmentStatus, all *[]metav1.Condition) error {
	node := c.Spec.NodeName
	if env.Labels[wbv1.NodeLabel] != node {
		if err := r.labelNode(ctx, env, node); err != nil {
			return err
		}
	}
	if err := r.bindStatus(env, c, next, all); err != nil {
		return err
	}
	r.Recorder.Eventf(env, c, "Normal", "Scheduled", "Place", "Placed on node %s", node)
	return nil
}

// bindStatus sets the status fields binding env to c's node.
func (r *EnvironmentReconciler) bindStatus(env *wbv1.Environment, c *wbv1.BackendCapability, next *wbv1.EnvironmentStatus, all *[]metav1.Condition) error {
	node := c.Spec.NodeName
	planDigest, effective, err := planFor(env, c, "")
	if err != nil {
		return err
	}
	next.NodeName = node
	next.CapabilityRef = c.Name
	next.PlanDigest = planDigest
	next.EffectiveOperationalContext = effective
	next.Unmet = nil
	setCondition(&next.Conditions, all, cond(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced,
		fmt.Sprintf("placed on node %s by capability %s under operational context %s", node, c.Name, effective), env.Generation))
	return nil
}

// labelNode writes env's node label: one label, held to the object's UID rather than its
// resourceVersion. The label is this controller's alone, and a version lock lost to the
// cleanup controller's finalizer write (made at the same moment for every new
// Environment) cost a conflict and a rate-limited retry on every placement. env's labels
// are updated from the answer.
func (r *EnvironmentReconciler) labelNode(ctx context.Context, env *wbv1.Environment, node string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": env.UID, "labels": map[string]string{wbv1.NodeLabel: node}}})
	if err == nil {
		err = r.Patch(ctx, env, client.RawPatch(types.MergePatchType, patch))
	}
	if err != nil {
		claimMarker(env)("mgr-label-error")
		return fmt.Errorf("labelling Environment %s with node %s: %w", client.ObjectKeyFromObject(env), node, err)
	}
	claimMarker(env)("mgr-node-labelled")
	return nil
}

// planFor is the normalized plan of env on the selected capability c: its digest and the
// effective operational context (actuation.PlanContext: the declared candidate, the floor
// of the capability actually selected, never below earlier).
func planFor(env *wbv1.Environment, c *wbv1.BackendCapability, earlier wbv1.ContextClass) (wbv1.Digest, wbv1.ContextClass, error) {
	var declared actuation.ContextClass
	if oc := env.Spec.OperationalContext; oc != nil {
		declared = actuation.ContextClass(oc.Class)
	}
	req := convert.Requirement(&env.Spec)
	capability := convert.Capability(&c.Spec)
	effective := actuation.PlanContext(declared, capability, req, actuation.ContextClass(earlier))
	candidateDigest, err := actuation.Digest(env.Spec.OperationalContext)
	if err != nil {
		return "", "", fmt.Errorf("digesting operational context of %s/%s: %w", env.Namespace, env.Name, err)
	}
	capDigest, err := actuation.Digest(c.Spec)
	if err != nil {
		return "", "", fmt.Errorf("digesting capability %s: %w", c.Name, err)
	}
	plan := actuation.Plan{
		BackendID: string(env.Spec.Backend), Requirement: req, CapabilityRef: c.Name, CapabilityDigest: capDigest,
		EffectiveContext: effective, CandidateContextDigest: candidateDigest, ImageRef: ptrStr(env.Spec.ImageRef),
	}
	if res := env.Spec.Resources; res != nil {
		plan.VCPUs, plan.MemoryMiB, plan.DiskMiB, plan.PIDs = deref(res.VCPUs), deref(res.MemoryMiB), deref(res.DiskMiB), deref(res.PIDs)
	}
	return wbv1.Digest(actuation.PlanDigest(plan)), wbv1.ContextClass(effective), nil
}

// replan re-derives the plan of a placed environment whose spec changed, on the capability
// it was placed by (the node stays: placement is not re-decided). The effective context
// never falls below the published one; a raised context gives a new plan digest, and what
// was admitted or published under the old context is superseded by its consumers (commands
// re-evaluate their admission, views are superseded). A capability that is gone keeps the
// published plan and reports it.
func (r *EnvironmentReconciler) replan(ctx context.Context, env *wbv1.Environment, next *wbv1.EnvironmentStatus, all *[]metav1.Condition) error {
	var c wbv1.BackendCapability
	if err := r.Get(ctx, client.ObjectKey{Name: next.CapabilityRef}, &c); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading BackendCapability %s of Environment %s/%s: %w", next.CapabilityRef, env.Namespace, env.Name, err)
		}
		setCondition(&next.Conditions, all, cond(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced,
			fmt.Sprintf("placed on node %s; capability %s is gone, so generation %d was not re-planned (context stays %s)",
				next.NodeName, next.CapabilityRef, env.Generation, next.EffectiveOperationalContext), env.Generation))
		return nil
	}
	digest, effective, err := planFor(env, &c, next.EffectiveOperationalContext)
	if err != nil {
		return err
	}
	before := next.EffectiveOperationalContext
	next.PlanDigest, next.EffectiveOperationalContext = digest, effective
	setCondition(&next.Conditions, all, cond(wbv1.ConditionScheduled, true, wbv1.ReasonReplanned,
		fmt.Sprintf("placed on node %s by capability %s; re-planned at generation %d under operational context %s",
			next.NodeName, c.Name, env.Generation, effective), env.Generation))
	if before != effective {
		log.FromContext(ctx).Info("Operational context changed", "environment", client.ObjectKeyFromObject(env), "from", before, "to", effective)
		r.Recorder.Eventf(env, &c, corev1.EventTypeNormal, "Replanned", "Plan",
			"Operational context %s -> %s at generation %d: admissions and views made under %s are superseded", before, effective, env.Generation, before)
	}
	return nil
}

func ptrStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// SetupWithManager registers the controller: environments, and unplaced environments again
// whenever a capability changes.
// environmentWorkers bounds the Environments the manager places at once.
const environmentWorkers = 4

func (r *EnvironmentReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&wbv1.Environment{}).
		// Several environments at once (never one key twice): a claimer's pass does not
		// wait behind its pool's refill or another environment's placement. Placement
		// counts nothing shared; two claimers racing for one member are decided by the
		// member's optimistic lock (environmentpool_claim.go).
		WithOptions(controller.Options{MaxConcurrentReconciles: environmentWorkers}).
		Watches(&wbv1.BackendCapability{}, handler.EnqueueRequestsFromMapFunc(r.unplaced)).
		Watches(&wbv1.EnvironmentPool{}, handler.EnqueueRequestsFromMapFunc(r.unplacedClaimers)).
		Named("environment").
		Complete(r)
}

func (r *EnvironmentReconciler) unplaced(ctx context.Context, _ client.Object) []reconcile.Request {
	var envs wbv1.EnvironmentList
	if err := r.List(ctx, &envs); err != nil {
		log.FromContext(ctx).Error(err, "Listing environments for a capability change")
		return nil
	}
	var out []reconcile.Request
	for _, e := range envs.Items {
		if e.Status.NodeName == "" {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&e)})
		}
	}
	return out
}

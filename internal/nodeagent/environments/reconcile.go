package environments

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/statusapply"
)

// inspectInterval re-observes ready environments (their roots can disappear under us).
const inspectInterval = time.Minute

type reconciler struct{ a *Room }

// environmentOwned is what the node writes of an Environment's status: its own conditions
// and the source generation, and — for a pool claimer (wbv1.EnvironmentPhaseWriter) — the
// phase and health conditions derived from all conditions, so the adopted instance's Ready
// and the phase a user reads arrive in one write. Otherwise the manager derives and writes
// them.
func environmentOwned(s *wbv1.EnvironmentStatus) wbv1.EnvironmentStatus {
	out := wbv1.EnvironmentStatus{
		SourceGeneration: s.SourceGeneration,
		Roots:            s.Roots, // sourced roots' materialization (sources.go)
		Conditions:       statusapply.Owned(s.Conditions, wbv1.ConditionReady, wbv1.ConditionCleanupComplete, wbv1.ConditionDegraded),
	}
	if wbv1.EnvironmentPhaseWriter(s) == wbv1.PhaseWriterNode {
		out.Phase = s.Phase
		out.Conditions = append(out.Conditions, statusapply.Owned(s.Conditions, wbv1.ConditionReconciling, wbv1.ConditionStalled)...)
	}
	return out
}

func specFor(env *wbv1.Environment) backends.Spec {
	s := backends.Spec{
		ID: string(env.UID), Ref: env.Namespace + "/" + env.Name, Generation: max(env.Status.SourceGeneration, 1),
		PlanDigest: string(env.Status.PlanDigest), ImageRef: ptr.Deref(env.Spec.ImageRef, ""),
	}
	for _, r := range env.Spec.Roots {
		s.Roots = append(s.Roots, backends.Root{Name: string(r.Name), HostPath: ptr.Deref(r.HostPath, ""), Source: ptr.Deref(r.Source, ""),
			ReadOnly: r.Access != nil && *r.Access == "ReadOnly"})
	}
	if res := env.Spec.Resources; res != nil {
		s.VCPUs, s.MemoryMiB, s.DiskMiB, s.PIDs = ptr.Deref(res.VCPUs, 0), ptr.Deref(res.MemoryMiB, 0), ptr.Deref(res.DiskMiB, 0), ptr.Deref(res.PIDs, 0)
	}
	// A VM's working disk outlives teardown only under RetainArtifacts.
	s.KeepDisk = env.Spec.Teardown != nil && *env.Spec.Teardown == wbv1.TeardownRetainArtifacts
	return s
}

// SpecFromRecord is the backend spec of an environment's store record (teardown and the
// recovery sweep, when its object is gone or not read yet).
func SpecFromRecord(e store.Environment) backends.Spec {
	s := backends.Spec{ID: e.UID, Ref: e.Namespace + "/" + e.Name}
	for name, p := range e.RootPaths {
		s.Roots = append(s.Roots, backends.Root{Name: name, HostPath: p})
	}
	return s
}

// pass is one Reconcile pass over an Environment: what it read, and what it writes.
type pass struct {
	env  *wbv1.Environment
	next *wbv1.EnvironmentStatus // the node's part of the status, as this pass leaves it
	all  []metav1.Condition      // every condition, as this pass leaves them
	mark func(step string)
	// result is the pass's requeue (inspectInterval unless a branch says otherwise).
	result ctrl.Result
	// recordWait waits for an adopted environment's record, written beside its status.
	recordWait func() error
}

// set sets a condition the node owns, in next and in all.
func (p *pass) set(t string, ok bool, reason, msg string) {
	statusapply.Set(&p.next.Conditions, &p.all, statusapply.Cond(t, ok, reason, msg, p.env.Generation))
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.a
	defer a.d.Kick() // what this pass opened or ended changes the free capacity (nodereport/free.go)
	var env wbv1.Environment
	if err := a.d.Client.Get(ctx, req.NamespacedName, &env); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return ctrl.Result{}, a.teardownDeleted(ctx, req.Namespace, req.Name)
		}
		return ctrl.Result{}, err
	}
	mark := claimMarker(&env)
	mark("node-reconcile")
	// Re-check ownership before acting: the label selected it, the status must agree.
	if env.Labels[wbv1.NodeLabel] != a.d.NodeName || env.Status.NodeName != a.d.NodeName {
		return ctrl.Result{}, nil
	}
	mark("node-owned")
	defer mark("node-pass-end")
	cur, next := environmentOwned(&env.Status), environmentOwned(&env.Status)
	p := &pass{env: &env, next: &next, all: append([]metav1.Condition(nil), env.Status.Conditions...), mark: mark,
		result: ctrl.Result{RequeueAfter: inspectInterval}}
	_, wasMounted := a.d.Registry.Mounted(string(env.UID))
	b, ok := a.d.Backends.Get(string(env.Spec.Backend))
	spec := specFor(&env)
	deleting := !env.DeletionTimestamp.IsZero()
	switch {
	case deleting && meta.IsStatusConditionTrue(p.all, wbv1.ConditionCleanupComplete):
		return ctrl.Result{}, nil // reported; the manager releases the finalizer
	case deleting && !ok:
		// No backend of that id here: this node never allocated anything for it.
		p.set(wbv1.ConditionCleanupComplete, true, "NothingHeld", "node "+a.d.NodeName+" holds nothing for this environment")
		p.set(wbv1.ConditionReady, false, wbv1.ReasonClosed, "environment is Closed")
		p.result = ctrl.Result{}
	case !ok:
		p.set(wbv1.ConditionReady, false, wbv1.ReasonFailed, fmt.Sprintf("capability-mismatch: backend %s is not available on node %s", env.Spec.Backend, a.d.NodeName))
	case meta.IsStatusConditionTrue(p.all, wbv1.ConditionExpired) || deleting:
		if err := a.tearDown(ctx, p, b, spec, deleting); err != nil {
			return ctrl.Result{}, err
		}
	case a.d.Cordoned():
		if err := a.drainForCordon(ctx, p, b, spec, wasMounted); err != nil {
			return ctrl.Result{}, err
		}
	default:
		if hold, err := a.allocate(ctx, p, b, spec); err != nil || hold {
			return ctrl.Result{}, err
		}
	}
	before, after := env.Status.Phase, wbv1.EnvironmentPhaseFor(p.all, !env.DeletionTimestamp.IsZero())
	if wbv1.EnvironmentPhaseWriter(&env.Status) == wbv1.PhaseWriterNode {
		next.Phase = after
		for _, hc := range wbv1.HealthConditions(wbv1.EnvironmentHealth(after), string(after), "environment is "+string(after), env.Generation) {
			p.set(hc.Type, hc.Status == metav1.ConditionTrue, hc.Reason, hc.Message)
		}
	}
	wrote, err := statusapply.Apply(ctx, a.d.Client, nodekit.FieldManager+"environment", &env, cur, next)
	if p.recordWait != nil {
		if rerr := p.recordWait(); rerr != nil {
			return ctrl.Result{}, rerr
		}
	}
	if err != nil {
		mark("node-status-error")
		return ctrl.Result{}, err
	}
	if wrote {
		mark("node-status-written")
	}
	if _, mounted := a.d.Registry.Mounted(string(env.UID)); mounted && !wasMounted && !deleting {
		a.d.Available(ctx, &env)
	}
	if wrote && before != after {
		a.d.Event(&env, corev1.EventTypeNormal, "Phase"+string(after), "Environment is "+string(after)+" on node "+a.d.NodeName)
	}
	return p.result, nil
}

// allocate allocates and starts env through its backend (or adopts its pool member's
// instance), records it, pins its host roots and applies spec.desiredState. hold says the
// pass must write nothing (a pool claim this node's cache does not show yet).
func (a *Room) allocate(ctx context.Context, p *pass, b backends.Backend, spec backends.Spec) (hold bool, err error) {
	env := p.env
	srcs, ok, err := a.bind(ctx, p, b, &spec)
	if err != nil || !ok {
		return false, err
	}
	if env.Labels[wbv1.PoolClaimedByLabel] != "" {
		p.result = ctrl.Result{} // a claimed pool member: its instance is its claimer's now (pool.go)
		return false, nil
	}
	if pending, err := a.poolClaimPending(ctx, env); err != nil {
		return false, err
	} else if pending {
		// A pool claimer whose member this node's cache does not show claimed by it
		// (the claim and the binding are written at once, pool.go): nothing is done and
		// nothing written until the claim shows (its member's change requeues it) or
		// the manager binds it anew.
		p.mark("node-claim-pending")
		return true, nil
	}
	adoptedFrom, err := a.adoptPoolMember(ctx, env, b, &spec)
	if err != nil {
		return false, err
	}
	p.mark("node-adopted")
	rec, err := a.allocatingRecord(env, b, spec)
	if err != nil {
		return false, err
	}
	// putRecord writes env's record; after an adoption, its first write replaces the
	// member's record in the same transaction (pool.go).
	putRecord := func(rec store.Environment) error {
		if adoptedFrom == "" {
			return a.d.Store.Environments().Put(rec)
		}
		err := a.d.Store.Environments().Replace(adoptedFrom, rec)
		if err == nil {
			adoptedFrom = ""
		}
		return err
	}
	// The record says Allocating before the backend makes anything, so a crash mid-way
	// leaves something to tear down from. An adopted instance exists already, under the
	// member's record until env's replaces it: its one record write comes after Start.
	if adoptedFrom == "" {
		// A host directory has one tenant: the record and its claims are written in one
		// store transaction that checks every other environment's claims (tenancy.go).
		if claimed, err := a.claim(p, rec); !claimed {
			return false, err
		}
	}
	p.mark("node-record-put")
	st, err := b.Allocate(ctx, spec)
	if err == nil {
		st, err = b.Start(ctx, spec)
	}
	if srcs != nil {
		p.next.Roots = a.mergeSources(srcs, env)
		err = sourceErr(err)
	}
	if err == nil && st.Phase == backends.PhaseReady {
		// The directories the backend admitted are the ones pinned next: claimed too
		// (a symlink swapped since the claim above names another directory).
		if more := mergeClaims(rec.HostClaims, mountedClaims(spec, st.Roots)); len(more) != len(rec.HostClaims) {
			rec.HostClaims = more
			if claimed, cerr := a.claim(p, rec); !claimed {
				return false, cerr
			}
		}
	}
	p.mark("node-started")
	if err != nil {
		if adoptedFrom != "" {
			// The adopted instance is env's now: its record, not the member's, names it.
			rec.Phase = string(backends.PhaseFailed)
			if perr := putRecord(rec); perr != nil {
				return false, fmt.Errorf("recording environment %s/%s: %w", env.Namespace, env.Name, perr)
			}
		}
		a.failed(p, "AllocationFailed", err.Error())
		return false, nil
	}
	if st.Phase == backends.PhaseReady {
		ids, err := a.d.Registry.pin(spec.ID, st.Roots, rec.RootIdentities)
		if err != nil {
			a.forgetEnv(spec.ID)
			code := string(actuation.CodeOf(err))
			if code == "" {
				code = string(actuation.CodeRootInvalid)
			}
			rec.Phase = string(backends.PhaseFailed)
			_ = putRecord(rec)
			msg := fmt.Sprintf("%s: %v", code, err)
			a.failed(p, "RootChanged", msg)
			return false, nil
		}
		rec.RootIdentities = ids
	}
	p.mark("node-roots-pinned")
	rec.Phase = string(st.Phase)
	if from := adoptedFrom; from != "" && st.Phase == backends.PhaseReady {
		// An adopted instance: the member's record is replaced by env's while the
		// status is written (one fsync and one API write at once, not one after the
		// other), and the pass ends only when both are done. A crash before the
		// record lands leaves the member's record and none of env: the next pass
		// adopts again — a move already done is found done (fixture-copy), or fails
		// and env is allocated afresh (pool.go) — so a Ready published first is never
		// left without an instance the node knows.
		done := make(chan error, 1)
		r := rec
		go func() { done <- a.d.Store.Environments().Replace(from, r) }()
		adoptedFrom = ""
		p.recordWait = func() error {
			if err := <-done; err != nil {
				return fmt.Errorf("recording adopted environment %s/%s: %w", env.Namespace, env.Name, err)
			}
			p.mark("node-record-ready")
			return nil
		}
	} else {
		if err := putRecord(rec); err != nil {
			return false, fmt.Errorf("recording environment %s/%s: %w", env.Namespace, env.Name, err)
		}
		p.mark("node-record-ready")
	}
	a.d.Registry.remember(spec, st)
	if st.Phase == backends.PhaseReady {
		rs := a.applyDesiredState(ctx, env, b, spec, fmt.Sprintf("%s environment ready with %d roots", b.ID(), len(st.Roots))) // pause.go
		p.set(wbv1.ConditionReady, rs.ready, rs.reason, rs.msg)
		if rs.unsupported {
			p.set(wbv1.ConditionDegraded, true, reasonPauseUnsupported, string(actuation.CodePauseUnsupported)+": backend "+b.ID()+" cannot pause; the environment keeps running")
		} else if c := meta.FindStatusCondition(p.all, wbv1.ConditionDegraded); c != nil && c.Reason == reasonPauseUnsupported {
			p.set(wbv1.ConditionDegraded, false, "AsDesired", "environment runs as spec.desiredState asks")
		}
	} else {
		p.set(wbv1.ConditionReady, false, string(st.Phase), st.Message)
	}
	if st.Generation > 0 {
		p.next.SourceGeneration = st.Generation // a VM backend: the generation of the running boot
	} else if p.next.SourceGeneration == 0 {
		p.next.SourceGeneration = spec.Generation
	}
	return false, nil
}

// bind checks what env asks of its backend before anything is made — its boot image, the
// resources the backend must enforce — and binds its sourced roots into spec. ok false:
// refused, the pass's status says why.
func (a *Room) bind(ctx context.Context, p *pass, b backends.Backend, spec *backends.Spec) (srcs *sourceOutcomes, ok bool, err error) {
	env := p.env
	if code, msg, err := a.resolveBootImage(ctx, env, b, spec); err != nil {
		return nil, false, err
	} else if code != "" {
		a.failed(p, "AllocationFailed", code+": "+msg)
		return nil, false, nil
	}
	if code, msg := unenforcedResources(b, *spec, EnforcesDisk(b)); code != "" {
		a.failed(p, "AllocationFailed", code+": "+msg)
		return nil, false, nil
	}
	// Sourced roots (git, archive, oci): bound here, materialized by Allocate (sources.go).
	srcs, code, msg, err := a.bindSources(ctx, env, b, spec)
	if err != nil {
		return nil, false, err
	} else if code != "" {
		srcs.failRoot(env, code)
		p.next.Roots = a.mergeSources(srcs, env)
		a.failed(p, "AllocationFailed", code+": "+msg)
		return nil, false, nil
	}
	return srcs, true, nil
}

// allocatingRecord is env's store record before the backend makes anything: Allocating,
// with its root paths, the identities and claims an earlier pass or process recorded, and
// the claims of its roots resolved now.
func (a *Room) allocatingRecord(env *wbv1.Environment, b backends.Backend, spec backends.Spec) (store.Environment, error) {
	rec := store.Environment{UID: spec.ID, Namespace: env.Namespace, Name: env.Name, Backend: b.ID(), RootPaths: map[string]string{},
		Phase: string(backends.PhaseAllocating), UpdatedAt: time.Now()}
	if old, found, err := a.d.Store.Environments().Get(spec.ID); err != nil {
		return rec, err
	} else if found {
		rec.RootIdentities = old.RootIdentities // pinned by an earlier pass or process
		rec.HostClaims = old.HostClaims         // bound by an earlier pass or process (tenancy.go)
	}
	for _, root := range spec.Roots {
		rec.RootPaths[root.Name] = root.HostPath
	}
	rec.HostClaims = mergeClaims(rec.HostClaims, hostClaimsOf(spec))
	return rec, nil
}

// failed refuses the allocation: Ready=False (Failed) with msg, and a warning event.
func (a *Room) failed(p *pass, reason, msg string) {
	p.set(wbv1.ConditionReady, false, wbv1.ReasonFailed, msg)
	a.d.Event(p.env, corev1.EventTypeWarning, reason, msg)
}

package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

var poolClaims = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "workbench_pool_claims_total",
	Help: "Pool claims decided by the manager: claimed (a member adopted) or empty (allocated normally).",
}, []string{"outcome"})

func init() { metrics.Registry.MustRegister(poolClaims) }

// EnvironmentPoolReconciler keeps an EnvironmentPool's unclaimed members at spec.replicas:
// it creates members from the template (the Environment controller and the node agent make
// them Ready as any Environment), replaces members of an older template (Recreate), deletes
// claimed members once their claimer holds the instance, and deletes the unclaimed members
// when the pool is deleted.
type EnvironmentPoolReconciler struct {
	client.Client
	// APIReader reads the pool and its members from the API server rather than the cache:
	// the member count and the claims counter are derived from them, and a cache that has
	// not yet seen this controller's own last writes would create surplus members or write
	// an older count back. Nil reads through Client.
	APIReader client.Reader
	Recorder  events.EventRecorder
}

func (r *EnvironmentPoolReconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=environmentpools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=environmentpools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=environmentpools/finalizers,verbs=update
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=environments,verbs=create;delete

// poolOwned is the status this controller writes (all of it).
func poolOwned(s *wbv1.EnvironmentPoolStatus) wbv1.EnvironmentPoolStatus { return *s.DeepCopy() }

// TemplateDigest is the short digest of a pool template (the members' PoolTemplateLabel).
func TemplateDigest(t *wbv1.EnvironmentSpec) (string, error) {
	d, err := actuation.Digest(t)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(d, "sha256:")[:16], nil
}

// Reconcile implements reconcile.Reconciler.
func (r *EnvironmentPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var pool wbv1.EnvironmentPool
	if err := r.reader().Get(ctx, req.NamespacedName, &pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var members wbv1.EnvironmentList
	if err := r.reader().List(ctx, &members, client.InNamespace(pool.Namespace), client.MatchingLabels{wbv1.PoolLabel: pool.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing members of EnvironmentPool %s: %w", req, err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		// Release the unclaimed members: they are deleted (their cleanup finalizer holds each
		// until its node tore the instance down); claimed ones belong to their claimers.
		for i := range members.Items {
			m := &members.Items[i]
			if m.Labels[wbv1.PoolClaimedByLabel] == "" && m.DeletionTimestamp.IsZero() {
				if err := r.deleteMember(ctx, m); err != nil {
					return ctrl.Result{}, err
				}
			}
		}
		if controllerutil.RemoveFinalizer(&pool, wbv1.PoolFinalizer) {
			if err := r.Update(ctx, &pool); err != nil {
				return ctrl.Result{}, fmt.Errorf("releasing the finalizer of EnvironmentPool %s: %w", req, err)
			}
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(&pool, wbv1.PoolFinalizer) {
		if err := r.Update(ctx, &pool); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer of EnvironmentPool %s: %w", req, err)
		}
	}
	digest, err := TemplateDigest(&pool.Spec.Template)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("digesting the template of EnvironmentPool %s: %w", req, err)
	}
	want := int32(1)
	if pool.Spec.Replicas != nil {
		want = *pool.Spec.Replicas
	}
	claims := pool.Status.Claims
	var settled []*wbv1.Environment // claimed members whose claimers hold the instance: counted, then deleted
	var current []*wbv1.Environment
	failed := 0
	for i := range members.Items {
		m := &members.Items[i]
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		if uid := m.Labels[wbv1.PoolClaimedByLabel]; uid != "" {
			done, err := r.claimSettled(ctx, m, uid)
			if err != nil {
				return ctrl.Result{}, err
			}
			if done {
				claims++
				settled = append(settled, m)
			}
			continue
		}
		if m.Labels[wbv1.PoolTemplateLabel] != digest {
			if pool.Spec.UpdateStrategy.Type != wbv1.PoolUpdateOnDelete {
				if err := r.deleteMember(ctx, m); err != nil {
					return ctrl.Result{}, err
				}
			}
			continue
		}
		if m.Status.Phase == wbv1.EnvironmentFailed || m.Status.Phase == wbv1.EnvironmentExpired {
			failed++
		}
		current = append(current, m)
	}
	// Scale down: surplus members go, those not Ready and the newest first.
	if extra := len(current) - int(want); extra > 0 {
		slices.SortFunc(current, func(a, b *wbv1.Environment) int {
			ar, br := a.Status.Phase == wbv1.EnvironmentReady, b.Status.Phase == wbv1.EnvironmentReady
			if ar != br {
				if ar {
					return 1
				}
				return -1
			}
			return b.CreationTimestamp.Compare(a.CreationTimestamp.Time)
		})
		for _, m := range current[:extra] {
			if err := r.deleteMember(ctx, m); err != nil {
				return ctrl.Result{}, err
			}
		}
		current = current[extra:]
	}
	ready := 0
	for _, m := range current {
		if m.Status.Phase == wbv1.EnvironmentReady {
			ready++
		}
	}
	// Refill. A failed member is not replaced (it would fail again): it stalls the pool
	// until the template changes or someone deletes it.
	// A template naming a backend no node can offer creates nothing (admission would refuse
	// every member): the pool stalls with the refusal instead of retrying creates forever.
	notOffered := actuation.CheckBackendOffered(string(pool.Spec.Template.Backend))
	for n := len(current); n < int(want) && notOffered == nil; n++ {
		m := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{
			Namespace: pool.Namespace, GenerateName: pool.Name + "-",
			Labels: map[string]string{wbv1.PoolLabel: pool.Name, wbv1.PoolTemplateLabel: digest},
		}, Spec: *pool.Spec.Template.DeepCopy()}
		if err := controllerutil.SetControllerReference(&pool, m, r.Scheme()); err != nil {
			return ctrl.Result{}, fmt.Errorf("owning a member of EnvironmentPool %s: %w", req, err)
		}
		if err := r.Create(ctx, m); err != nil {
			return ctrl.Result{}, fmt.Errorf("creating a member of EnvironmentPool %s: %w", req, err)
		}
		logger.V(1).Info("Created pool member", "pool", req.NamespacedName, "member", m.Name)
		current = append(current, m)
	}
	cur := poolOwned(&pool.Status)
	next := poolOwned(&pool.Status)
	next.Replicas, next.ReadyReplicas, next.Claims, next.TemplateDigest = int32(len(current)), int32(ready), claims, digest
	next.ObservedGeneration = pool.Generation
	all := append([]metav1.Condition(nil), next.Conditions...)
	gen := pool.Generation
	health, reason, msg := wbv1.HealthProgressing, "Filling", fmt.Sprintf("%d of %d members ready", ready, want)
	switch {
	case failed > 0:
		health, reason, msg = wbv1.HealthStalled, "MemberFailed", fmt.Sprintf("%d members failed or expired; %d of %d ready (fix the template or delete them)", failed, ready, want)
	case notOffered != nil:
		health, reason, msg = wbv1.HealthStalled, "BackendNotOffered", notOffered.Error()
	case ready == int(want) && len(current) == int(want):
		health, reason = wbv1.HealthCurrent, "Ready"
	}
	setCondition(&next.Conditions, &all, cond(wbv1.ConditionReady, health == wbv1.HealthCurrent, reason, msg, gen))
	for _, hc := range wbv1.HealthConditions(health, reason, msg, gen) {
		setCondition(&next.Conditions, &all, hc)
	}
	// The count is written before the settled members are deleted, held to the pool's
	// version read: a pass that lost a race writes nothing and deletes nothing (the newer
	// pool's event runs the next pass), so a claim is never lost; a member whose delete
	// failed after its count was written is counted again (a failed delete is reported).
	wrote, err := applyStatusIfUnchanged(ctx, r.Client, "environmentpool", &pool, cur, next)
	if kerrors.IsConflict(err) {
		logger.V(1).Info("Pool changed since read; the next pass decides", "pool", req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, m := range settled {
		if err := r.deleteMember(ctx, m); err != nil {
			return ctrl.Result{}, err
		}
	}
	if wrote && cur.ReadyReplicas != next.ReadyReplicas && health == wbv1.HealthCurrent {
		r.Recorder.Eventf(&pool, nil, corev1.EventTypeNormal, "PoolReady", "Reconcile", "%d members ready", ready)
	}
	return ctrl.Result{}, nil
}

// claimSettled reports whether the claim of member m by the Environment with UID uid is
// over: the claimer holds the instance (Ready with m as its pool member), or it is gone or
// failed, or it was placed without m. Only then is the member object deleted: before, its
// deletion would tear down the instance the claimer is adopting.
func (r *EnvironmentPoolReconciler) claimSettled(ctx context.Context, m *wbv1.Environment, uid string) (bool, error) {
	name := m.Annotations[wbv1.PoolClaimedByAnnotation]
	if name == "" {
		return true, nil
	}
	var c wbv1.Environment
	if err := r.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: name}, &c); err != nil {
		if kerrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("reading claimer %s of pool member %s/%s: %w", name, m.Namespace, m.Name, err)
	}
	switch {
	case string(c.UID) != uid, !c.DeletionTimestamp.IsZero():
		return true, nil
	case c.Status.PoolMember == nil:
		return c.Status.NodeName != "", nil // placed without this member
	case c.Status.PoolMember.UID != string(m.UID):
		return true, nil
	}
	switch c.Status.Phase {
	case wbv1.EnvironmentReady, wbv1.EnvironmentFailed, wbv1.EnvironmentClosed, wbv1.EnvironmentExpired:
		return true, nil
	}
	return false, nil
}

func (r *EnvironmentPoolReconciler) deleteMember(ctx context.Context, m *wbv1.Environment) error {
	if err := r.Delete(ctx, m, client.Preconditions{UID: &m.UID}); err != nil && !kerrors.IsNotFound(err) && !kerrors.IsConflict(err) {
		return fmt.Errorf("deleting pool member %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

// SetupWithManager registers the controller: pools, and the pool of every member or
// claimer whose Environment changes.
func (r *EnvironmentPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&wbv1.EnvironmentPool{}).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(poolOf)).
		Named("environmentpool").
		Complete(r)
}

// poolOf maps a member (its pool label) or a claimer (its poolRef) to the pool.
func poolOf(_ context.Context, o client.Object) []reconcile.Request {
	env, ok := o.(*wbv1.Environment)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	if p := env.Labels[wbv1.PoolLabel]; p != "" {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: env.Namespace, Name: p}})
	}
	if env.Spec.PoolRef != nil && env.Spec.PoolRef.Name != env.Labels[wbv1.PoolLabel] {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: env.Namespace, Name: env.Spec.PoolRef.Name}})
	}
	return out
}

// unplacedClaimers maps a pool to its claimers still waiting for placement (a pool created
// after them, or whose template now matches).
func (r *EnvironmentReconciler) unplacedClaimers(ctx context.Context, o client.Object) []reconcile.Request {
	var envs wbv1.EnvironmentList
	if err := r.List(ctx, &envs, client.InNamespace(o.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "Listing claimers of a pool")
		return nil
	}
	var out []reconcile.Request
	for _, e := range envs.Items {
		if e.Status.NodeName == "" && e.Spec.PoolRef != nil && e.Spec.PoolRef.Name == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&e)})
		}
	}
	return out
}

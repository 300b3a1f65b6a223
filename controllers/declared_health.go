package controllers

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/skillsapi"
)

// Declared kinds an operator applies that nothing else realizes (issue 30 item 7,
// docs/gitops.md): WorkbenchPolicy, ActionSigner, BundleSigner and Skill are read where
// they are used, so their effect is real once the manager has checked them the way their
// users read them. This reconciler writes status.observedGeneration, Valid and the kstatus
// conditions: Current when the object is usable as applied, Stalled (Failed) when its
// users would refuse it (a key that does not parse, a skill manifest that does not
// validate).

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=workbenchpolicies;actionsigners;bundlesigners;skills,verbs=get;list;watch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=workbenchpolicies/status;actionsigners/status;bundlesigners/status;skills/status,verbs=get;update;patch

// declaredStatus is the projection of the status fields this reconciler owns; every
// declared kind's status spells them the same way (keyID only on signers).
type declaredStatus struct {
	KeyID              wbv1.Digest        `json:"keyID,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// DeclaredHealthReconciler checks one declared kind.
type DeclaredHealthReconciler[T client.Object] struct {
	client.Client
	// Kind names the kind (field manager, controller name).
	Kind   string
	NewObj func() T
	// Status returns the stored status projection.
	Status func(T) declaredStatus
	// Check validates the object as its users read it: the key id of a signer, or an error.
	Check func(T) (wbv1.Digest, error)
}

// Reconcile implements reconcile.Reconciler.
func (r *DeclaredHealthReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.NewObj()
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cur := r.Status(obj)
	next := declaredStatus{ObservedGeneration: obj.GetGeneration(), Conditions: ownedConditions(cur.Conditions, wbv1.ConditionValid, wbv1.ConditionReconciling, wbv1.ConditionStalled)}
	cur.Conditions = ownedConditions(cur.Conditions, wbv1.ConditionValid, wbv1.ConditionReconciling, wbv1.ConditionStalled)
	all := append([]metav1.Condition(nil), r.Status(obj).Conditions...)
	gen := obj.GetGeneration()
	keyID, err := r.Check(obj)
	if err != nil {
		msg := truncate(err.Error(), 1024)
		setCondition(&next.Conditions, &all, cond(wbv1.ConditionValid, false, "Invalid", msg, gen))
		gitopsHealth(&next.Conditions, &all, wbv1.HealthStalled, "Invalid", msg, gen)
	} else {
		next.KeyID = keyID
		msg := fmt.Sprintf("the %s is in effect as applied", r.Kind)
		setCondition(&next.Conditions, &all, cond(wbv1.ConditionValid, true, "Valid", msg, gen))
		gitopsHealth(&next.Conditions, &all, wbv1.HealthCurrent, "Valid", msg, gen)
	}
	if _, err := applyStatus(ctx, r.Client, r.Kind, obj, cur, next); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing %s %s status: %w", r.Kind, req, err)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler.
func (r *DeclaredHealthReconciler[T]) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(r.NewObj()).Named("declared-" + r.Kind).Complete(r)
}

func declaredReconcilers(c client.Client) []interface{ SetupWithManager(ctrl.Manager) error } {
	return []interface{ SetupWithManager(ctrl.Manager) error }{
		&DeclaredHealthReconciler[*wbv1.WorkbenchPolicy]{Client: c, Kind: "WorkbenchPolicy",
			NewObj: func() *wbv1.WorkbenchPolicy { return &wbv1.WorkbenchPolicy{} },
			Status: func(o *wbv1.WorkbenchPolicy) declaredStatus {
				return declaredStatus{ObservedGeneration: o.Status.ObservedGeneration, Conditions: o.Status.Conditions}
			},
			// The schema admits only what the manager can use: every stored policy is in
			// effect (the consent policy, posture and signature policy are read where used).
			Check: func(*wbv1.WorkbenchPolicy) (wbv1.Digest, error) { return "", nil }},
		&DeclaredHealthReconciler[*wbv1.ActionSigner]{Client: c, Kind: "ActionSigner",
			NewObj: func() *wbv1.ActionSigner { return &wbv1.ActionSigner{} },
			Status: func(o *wbv1.ActionSigner) declaredStatus {
				return declaredStatus{KeyID: o.Status.KeyID, ObservedGeneration: o.Status.ObservedGeneration, Conditions: o.Status.Conditions}
			},
			Check: func(o *wbv1.ActionSigner) (wbv1.Digest, error) {
				return signerKeyID(o.Spec.PublicKey, o.Spec.Namespaces)
			}},
		&DeclaredHealthReconciler[*wbv1.BundleSigner]{Client: c, Kind: "BundleSigner",
			NewObj: func() *wbv1.BundleSigner { return &wbv1.BundleSigner{} },
			Status: func(o *wbv1.BundleSigner) declaredStatus {
				return declaredStatus{KeyID: o.Status.KeyID, ObservedGeneration: o.Status.ObservedGeneration, Conditions: o.Status.Conditions}
			},
			Check: func(o *wbv1.BundleSigner) (wbv1.Digest, error) {
				return signerKeyID(o.Spec.PublicKey, o.Spec.Namespaces)
			}},
		&DeclaredHealthReconciler[*wbv1.Skill]{Client: c, Kind: "Skill",
			NewObj: func() *wbv1.Skill { return &wbv1.Skill{} },
			Status: func(o *wbv1.Skill) declaredStatus {
				return declaredStatus{ObservedGeneration: o.Status.ObservedGeneration, Conditions: o.Status.Conditions}
			},
			Check: func(o *wbv1.Skill) (wbv1.Digest, error) {
				m, err := skillsapi.Manifest(&o.Spec)
				if err != nil {
					return "", err
				}
				return "", m.Validate()
			}},
	}
}

// signerKeyID is the key ID of a signer (ActionSigner, BundleSigner) whose key decodes and
// whose namespaces are valid (actions.ValidateSigner).
func signerKeyID(publicKey string, namespaces []string) (wbv1.Digest, error) {
	id, err := actions.ValidateSigner(publicKey, namespaces)
	return wbv1.Digest(id), err
}

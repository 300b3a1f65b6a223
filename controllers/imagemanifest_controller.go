package controllers

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// ImageManifestReconciler derives an ImageManifest's health from what node agents verified
// (issue 30 item 7): Ready and Current only once a node verified a variant of the manifest's
// current generation, Reconciling until then, Stalled when every node that tried this
// generation failed. Node agents write status.verifiedOn (their own entries); the manager
// writes observedGeneration and the conditions.
type ImageManifestReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=imagemanifests,verbs=get;list;watch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=imagemanifests/status,verbs=get;update;patch

type imageManifestOwned struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// Reconcile implements reconcile.Reconciler.
func (r *ImageManifestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var im wbv1.ImageManifest
	if err := r.Get(ctx, req.NamespacedName, &im); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	all := append([]metav1.Condition(nil), im.Status.Conditions...)
	cur := imageManifestOwned{ObservedGeneration: im.Status.ObservedGeneration,
		Conditions: ownedConditions(im.Status.Conditions, wbv1.ConditionReady, wbv1.ConditionReconciling, wbv1.ConditionStalled)}
	next := imageManifestOwned{ObservedGeneration: im.Generation, Conditions: append([]metav1.Condition(nil), cur.Conditions...)}

	var ok, failed []string
	for _, v := range im.Status.VerifiedOn {
		if v.Generation != im.Generation {
			continue
		}
		if v.Code == "" {
			ok = append(ok, v.NodeName+"/"+v.Variant)
		} else {
			failed = append(failed, fmt.Sprintf("%s/%s: %s: %s", v.NodeName, v.Variant, v.Code, v.Message))
		}
	}
	health, reason, msg := wbv1.HealthProgressing, "AwaitingVerification",
		fmt.Sprintf("no node has verified generation %d of this image yet", im.Generation)
	switch {
	case len(ok) > 0:
		health, reason, msg = wbv1.HealthCurrent, "Verified", fmt.Sprintf("verified on %v", truncList(ok))
	case len(failed) > 0:
		health, reason, msg = wbv1.HealthStalled, "VerificationFailed", fmt.Sprintf("no node verified it: %v", truncList(failed))
	}
	msg = truncate(msg, 1024)
	setCondition(&next.Conditions, &all, cond(wbv1.ConditionReady, health == wbv1.HealthCurrent, reason, msg, im.Generation))
	for _, hc := range wbv1.HealthConditions(health, reason, msg, im.Generation) {
		setCondition(&next.Conditions, &all, hc)
	}
	_, err := applyStatus(ctx, r.Client, "imagemanifest", &im, cur, next)
	return ctrl.Result{}, err
}

func truncList(s []string) []string {
	if len(s) > 8 {
		return append(s[:8:8], fmt.Sprintf("and %d more", len(s)-8))
	}
	return s
}

// SetupWithManager registers the controller.
func (r *ImageManifestReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&wbv1.ImageManifest{}).Named("imagemanifest").Complete(r)
}

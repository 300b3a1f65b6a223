package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// gitopsHealth sets the kstatus conditions (Reconciling, Stalled) of a declarative kind
// (issue 30 item 7, docs/gitops.md).
func gitopsHealth(owned, all *[]metav1.Condition, h wbv1.Health, reason, msg string, gen int64) {
	for _, hc := range wbv1.HealthConditions(h, reason, truncate(msg, 1024), gen) {
		setCondition(owned, all, hc)
	}
}

// catalogHealth: an ActionCatalog is Current when it is well-formed and authorized (signed
// by a signer in scope, or admitted unsigned by the policy's bootstrap); Stalled when it is
// malformed or not authorized: its actions do not run until someone fixes or signs it.
func catalogHealth(next *wbv1.ActionCatalogStatus, all *[]metav1.Condition, gen int64) {
	valid := meta.FindStatusCondition(next.Conditions, wbv1.ConditionValid)
	auth := meta.FindStatusCondition(next.Conditions, "Authorized")
	switch {
	case valid != nil && valid.Status != metav1.ConditionTrue:
		gitopsHealth(&next.Conditions, all, wbv1.HealthStalled, valid.Reason, valid.Message, gen)
	case auth != nil && (auth.Status == metav1.ConditionTrue || auth.Reason == ReasonBootstrap):
		gitopsHealth(&next.Conditions, all, wbv1.HealthCurrent, auth.Reason, auth.Message, gen)
	case auth != nil:
		gitopsHealth(&next.Conditions, all, wbv1.HealthStalled, auth.Reason, auth.Message, gen)
	}
}

// Package controllers holds the manager's cluster controllers, one reconciler per kind. Each
// is thin: read, decide with the actuation core, write owned status fields by server-side
// apply under a field manager of its own.
package controllers

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sensorium.dev/workbench/internal/statusapply"
)

// FieldManagerPrefix names the manager's field managers; each controller appends its kind,
// so controllers never take each other's status fields.
const FieldManagerPrefix = "workbench-manager/"

func applyStatus(ctx context.Context, c client.Client, owner string, obj client.Object, cur, next any) (bool, error) {
	return statusapply.Apply(ctx, c, FieldManagerPrefix+owner, obj, cur, next)
}

// applyStatusIfUnchanged is applyStatus held to the version obj was read at.
func applyStatusIfUnchanged(ctx context.Context, c client.Client, owner string, obj client.Object, cur, next any) (bool, error) {
	return statusapply.ApplyIfUnchanged(ctx, c, FieldManagerPrefix+owner, obj, cur, next)
}

func ownedConditions(all []metav1.Condition, types ...string) []metav1.Condition {
	return statusapply.Owned(all, types...)
}

func setCondition(owned, all *[]metav1.Condition, c metav1.Condition) { statusapply.Set(owned, all, c) }

func cond(t string, s bool, reason, msg string, gen int64) metav1.Condition {
	return statusapply.Cond(t, s, reason, msg, gen)
}

func truncate(s string, n int) string { return statusapply.Truncate(s, n) }

func requeueAt(now, t time.Time) time.Duration { return statusapply.RequeueAt(now, t) }

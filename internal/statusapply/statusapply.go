// Package statusapply writes the status fields a component owns by server-side apply, under
// a field manager of its own, and only when they changed. The manager's controllers and the
// node agent share it, so both follow one rule for status writes.
package statusapply

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Apply writes the owned status fields of obj by server-side apply when they differ
// from cur (the same projection of the stored status). It returns whether it wrote.
func Apply(ctx context.Context, c client.Client, owner string, obj client.Object, cur, next any) (bool, error) {
	return apply(ctx, c, owner, obj, "", cur, next)
}

// ApplyIfUnchanged is Apply with obj's resourceVersion as a precondition: the write fails
// with a Conflict (apierrors.IsConflict) when any other writer changed the object since obj
// was read. Two components that may each decide the same question (the node's fast-path
// admission and the manager's gate) use it so that exactly one decision lands.
func ApplyIfUnchanged(ctx context.Context, c client.Client, owner string, obj client.Object, cur, next any) (bool, error) {
	rv := obj.GetResourceVersion()
	if rv == "" {
		return false, fmt.Errorf("applying status of %s: no resourceVersion to hold the write to", obj.GetName())
	}
	return apply(ctx, c, owner, obj, rv, cur, next)
}

// applyBody is the server-side apply request: the object's identity and the owned status
// fields only.
type applyBody struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Metadata   applyMeta `json:"metadata"`
	Status     any       `json:"status"`
}

type applyMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	// ResourceVersion, when set, is a precondition server-side apply honours.
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

func apply(ctx context.Context, c client.Client, owner string, obj client.Object, rv string, cur, next any) (bool, error) {
	if equality.Semantic.DeepEqual(cur, next) || storesTheSame(cur, next) {
		return false, nil
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return false, fmt.Errorf("resolving kind of %T: %w", obj, err)
	}
	body, err := json.Marshal(applyBody{
		APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
		Metadata: applyMeta{Name: obj.GetName(), Namespace: obj.GetNamespace(), ResourceVersion: rv},
		Status:   next,
	})
	if err != nil {
		return false, fmt.Errorf("converting status of %s: %w", obj.GetName(), err)
	}
	// The request goes through the metadata client (the target is PartialObjectMetadata):
	// the same PATCH of the status subresource, but the API server answers with the
	// object's metadata only, so no caller pays for decoding the whole stored object
	// (into Unstructured, as an unstructured apply did) that none of them reads. obj is
	// left as it was.
	target := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: obj.GetName(), Namespace: obj.GetNamespace()}}
	target.SetGroupVersionKind(gvk)
	if err := c.Status().Patch(ctx, target, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("applying status of %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	return true, nil
}

// storesTheSame says whether cur and next encode alike: what the API server would store is
// the same (a metav1.Time keeps whole seconds, so a time computed in this process differs
// from the one read back only below them). Sending such a projection stores a new version
// anyway — its field manager's timestamp moves — which is a watch event and an etcd
// revision for nothing.
func storesTheSame(cur, next any) bool {
	a, err := json.Marshal(cur)
	if err != nil {
		return false
	}
	b, err := json.Marshal(next)
	return err == nil && bytes.Equal(a, b)
}

// Owned returns copies of the conditions of the given types.
func Owned(all []metav1.Condition, types ...string) []metav1.Condition {
	var out []metav1.Condition
	for _, t := range types {
		if c := meta.FindStatusCondition(all, t); c != nil {
			out = append(out, *c)
		}
	}
	return out
}

// Set sets a condition on both the owned set and the full view (used to derive
// phases), keeping lastTransitionTime when the status does not change.
func Set(owned, all *[]metav1.Condition, c metav1.Condition) {
	meta.SetStatusCondition(owned, c)
	meta.SetStatusCondition(all, c)
}

// Cond builds a condition.
func Cond(t string, s bool, reason, msg string, gen int64) metav1.Condition {
	st := metav1.ConditionFalse
	if s {
		st = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: st, Reason: reason, Message: Truncate(msg, 1024), ObservedGeneration: gen}
}

// Truncate shortens s to at most n bytes.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// RequeueAt returns the delay until t, at least one second.
func RequeueAt(now, t time.Time) time.Duration {
	if d := t.Sub(now); d > time.Second {
		return d
	}
	return time.Second
}

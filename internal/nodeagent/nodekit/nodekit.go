// Package nodekit holds the small pieces every room of the node agent shares: the field
// manager prefix, the wake channel send, the retry options of the node's controllers, the
// event hook and the "not available here yet" sentinel. It imports no room.
package nodekit

import (
	"context"
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/statusapply"
)

// FieldManager prefixes the node agent's field managers.
const FieldManager = "workbench-node-agent/"

// ErrNotYet says a scoped resource is not available on this node yet (an environment
// still allocating, a session still opening): the caller waits to be woken.
var ErrNotYet = errors.New("the scoped resource is not available on this node yet")

// EventFunc records a Kubernetes event about obj (nil-safe at the agent: before Run it
// records nothing).
type EventFunc func(obj client.Object, evType, reason, note string)

// MaxRetryDelay bounds the backoff of a failed pass of the node's controllers: when the
// manager's webhooks are away (its pod evicted by kubectl drain, restarted), the outcomes
// the node holds reach the API within this long of their return, not after the default
// exponential backoff's quarter of an hour.
const MaxRetryDelay = 15 * time.Second

// RetryOptions are the controller options of a node controller whose failed passes retry
// within MaxRetryDelay.
func RetryOptions() controller.Options {
	return controller.Options{RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxRetryDelay)}
}

// Wake re-queues obj on ch, or gives up when ctx ends (a nil ctx: never). Senders are
// bounded (one goroutine per running command or session, both capped), and the
// controller drains the channel continuously.
func Wake(ctx context.Context, ch chan event.GenericEvent, obj client.Object) {
	var done <-chan struct{} // nil: never (an agent under construction)
	if ctx != nil {
		done = ctx.Done()
	}
	select {
	case ch <- event.GenericEvent{Object: obj}:
	case <-done:
	}
}

// RequestsOf lists the keys of items that keep accepts (all when keep is nil).
func RequestsOf[T any, PT interface {
	*T
	client.Object
}](items []T, keep func(PT) bool) []reconcile.Request {
	var out []reconcile.Request
	for i := range items {
		o := PT(&items[i])
		if keep == nil || keep(o) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
	}
	return out
}

// ArtifactOwned is the part of an Artifact's status the node owns (what it applies under
// its field manager).
func ArtifactOwned(s *wbv1.ArtifactStatus) wbv1.ArtifactStatus {
	return wbv1.ArtifactStatus{
		Digest: s.Digest, Size: s.Size, Base: s.Base, Files: s.Files, NodeName: s.NodeName, RetainedUntil: s.RetainedUntil, Refusal: s.Refusal,
		ObservedGeneration: s.ObservedGeneration,
		Conditions:         statusapply.Owned(s.Conditions, wbv1.ConditionReady, wbv1.ConditionCleanupComplete),
	}
}

// ScopeSession is the session a wait's or probe's scope names ("" for none).
func ScopeSession(s *wbv1.Scope) string {
	if s != nil && s.SessionRef != nil {
		return string(*s.SessionRef)
	}
	return ""
}

// SetHealth sets the kstatus Reconciling and Stalled conditions for h (every kind the node
// writes carries them, with the phase as their reason).
func SetHealth(conds *[]metav1.Condition, h wbv1.Health, reason, msg string, gen int64) {
	for _, hc := range wbv1.HealthConditions(h, reason, msg, gen) {
		statusapply.Set(conds, conds, hc)
	}
}

// Root is one environment root as a room sees it: its mount and its file access, wherever
// it lives (a host directory or a directory inside the environment's VM guest: the agent
// opens the one its backend's Env says). Rooms never ask which.
type Root struct {
	Mount backends.MountedRoot
	Files backends.RootFiles
}

package v1alpha1

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
)

// NoSessionRoom says why the node has no session slot for the environment ns/name
// by its published free capacity ("" when it has one, or publishes none, or is not Ready).
func (n *WorkbenchNode) NoSessionRoom(ns, name string) string {
	f := n.Status.Free
	if f == nil || !meta.IsStatusConditionTrue(n.Status.Conditions, ConditionReady) {
		return ""
	}
	at := f.ObservedTime.UTC().Format(time.RFC3339)
	if f.Sessions <= 0 {
		caps := int32(0)
		if n.Status.Caps != nil {
			caps = n.Status.Caps.Sessions
		}
		return fmt.Sprintf("node %s has no free session slot (cap %d, counted at %s); watch WorkbenchNode %s status.free.sessions and retry when it rises",
			n.Name, caps, at, n.Name)
	}
	for _, e := range f.FullEnvironments {
		if e.Namespace == ns && string(e.Name) == name {
			return fmt.Sprintf("environment %s/%s is at its per-environment session cap on node %s (counted at %s); retry when WorkbenchNode %s status.free.fullEnvironments no longer lists it",
				ns, name, n.Name, at, n.Name)
		}
	}
	return ""
}

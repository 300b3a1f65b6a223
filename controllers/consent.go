package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// DefaultGrantLifetime ends a remembered grant that names no expiry.
const DefaultGrantLifetime = 30 * 24 * time.Hour

// Field indexes shared by the consent controllers.
const (
	indexGrantRequest   = "spec.requestRef"
	indexCommandProfile = "spec.profileRef"
	indexCommandSession = "spec.sessionRef"
	indexCommandIdemKey = "spec.idempotencyKey"
)

// grantApproval derives a grant's delta digest and approval ref from its request: one place
// for both the grant and the request controllers.
func grantApproval(g *wbv1.ConsentGrant, cr *wbv1.ConsentRequest) (deltaDigest, approvalRef string) {
	deltaDigest = actuation.ConsentDeltaDigest(convert.Delta(g.Namespace, g, &cr.Spec.Descriptor))
	return deltaDigest, actuation.ApprovalRef(deltaDigest)
}

// grantExpiry is when a grant stops being effective.
func grantExpiry(g *wbv1.ConsentGrant) time.Time {
	if g.Spec.ExpiresAt != nil {
		return g.Spec.ExpiresAt.Time
	}
	return g.CreationTimestamp.Add(DefaultGrantLifetime)
}

func getRequest(ctx context.Context, c client.Reader, ns, name string) (*wbv1.ConsentRequest, error) {
	var cr wbv1.ConsentRequest
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cr); err != nil {
		return nil, fmt.Errorf("reading ConsentRequest %s/%s: %w", ns, name, err)
	}
	return &cr, nil
}

// answers reports whether g was given for exactly this request object: the admission
// webhook stamps the request's UID into the grant, so a request recreated under the same
// name is never decided by a grant given for its predecessor.
func answers(g *wbv1.ConsentGrant, cr *wbv1.ConsentRequest) bool {
	return g.Spec.RequestUID != "" && g.Spec.RequestUID == cr.UID
}

// consumedBinding reports whether g is an allow-once grant consumed by the very command
// object its request names, and not revoked or expired (the grant controller leaves a
// diagnostic for those). Such an entry stays in the effective profile, bound to that UID,
// so the node agent can verify the binding before it starts the command; it can admit no
// other object.
func consumedBinding(g *wbv1.ConsentGrant, cr *wbv1.ConsentRequest) bool {
	return g.Spec.Scope == wbv1.ConsentAllowOnce && answers(g, cr) && g.Status.ConsumedByUID != "" &&
		g.Status.ConsumedByUID == cr.Spec.Descriptor.CommandUID && len(g.Status.Diagnostics) == 0 &&
		(g.Spec.Revoked == nil || !*g.Spec.Revoked)
}

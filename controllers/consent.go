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

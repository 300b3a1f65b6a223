package webhooks

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// durableNotGrantable refuses (consent-capability-not-grantable) a remembered grant the
// WorkbenchPolicy's consent block does not let be given for the request's capability and
// profile (issue 30 item 4; the rule is actuation.ConsentPolicy.DurableGrantable).
func durableNotGrantable(ctx context.Context, r client.Reader, g *wbv1.ConsentGrant, d *wbv1.ConsentDescriptor) (*actuation.Refusal, error) {
	if !actuation.DurableScope(actuation.ConsentScope(g.Spec.Scope)) {
		return nil, nil
	}
	pol, err := convert.ReadConsentPolicy(ctx, r)
	if err != nil {
		return nil, err
	}
	return pol.DurableGrantable(string(d.Capability), g.Namespace, string(d.ProfileRef)), nil
}

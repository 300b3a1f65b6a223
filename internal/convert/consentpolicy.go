package convert

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// ConsentPolicyOf converts the WorkbenchPolicy's consent block (nil policy = the default).
func ConsentPolicyOf(pol *wbv1.WorkbenchPolicy) actuation.ConsentPolicy {
	if pol == nil || pol.Spec.Consent == nil {
		return actuation.ConsentPolicy{}
	}
	c := pol.Spec.Consent
	out := actuation.ConsentPolicy{Configured: true}
	for _, r := range c.DurableGrants {
		out.Rules = append(out.Rules, actuation.DurableGrantRule{Capability: string(r.Capability), Namespaces: r.Namespaces, Profiles: r.Profiles})
	}
	if s := c.DenyCooldownSeconds; s != nil {
		out.DenyCooldown = time.Duration(*s) * time.Second
		if *s == 0 {
			out.DenyCooldown = -1
		}
	}
	return out
}

// ReadConsentPolicy reads the WorkbenchPolicy singleton's consent policy (absent = default).
func ReadConsentPolicy(ctx context.Context, r client.Reader) (actuation.ConsentPolicy, error) {
	var pol wbv1.WorkbenchPolicy
	if err := r.Get(ctx, client.ObjectKey{Name: wbv1.WorkbenchPolicyName}, &pol); err != nil {
		if apierrors.IsNotFound(err) {
			return actuation.ConsentPolicy{}, nil
		}
		return actuation.ConsentPolicy{}, fmt.Errorf("reading WorkbenchPolicy %s: %w", wbv1.WorkbenchPolicyName, err)
	}
	return ConsentPolicyOf(&pol), nil
}

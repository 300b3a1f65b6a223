package controllers

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// The consent policy's hooks (issue 30 item 4). The rules live in internal/actuation
// (ConsentPolicy, DenyCooldown); these read the WorkbenchPolicy and apply them where a
// consent request is created (consentGate), where it is decided (rememberDenial) and where a
// grant is kept effective (durableNotGrantable).

// consentGate runs before a new consent request with descriptor d is created in ns: it
// refuses (consent-cooldown) while the requester's argv cools down after a deny, and
// otherwise returns the options the policy lets an operator be offered (remembered scopes
// only where durable grants are grantable).
func consentGate(ctx context.Context, r client.Reader, cd *actuation.DenyCooldown, ns string, d *wbv1.ConsentDescriptor,
	options []wbv1.ConsentScope, now time.Time) ([]wbv1.ConsentScope, *actuation.Refusal, error) {
	pol, err := convert.ReadConsentPolicy(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	if d.Requester != "" && pol.Cooldown() > 0 {
		if ref := cd.Check(ns, d.Requester, actuation.CooldownArgvDigest(d.Argv), now); ref != nil {
			return nil, ref, nil
		}
	}
	in := make([]actuation.ConsentScope, len(options))
	for i, o := range options {
		in[i] = actuation.ConsentScope(o)
	}
	var out []wbv1.ConsentScope
	for _, o := range pol.GrantableOptions(in, string(d.Capability), ns, string(d.ProfileRef)) {
		out = append(out, wbv1.ConsentScope(o))
	}
	return out, nil, nil
}

// rememberDenial records a denied request in the cooldown memory. It is called for every
// reconcile of a request, so the memory is rebuilt from the requests still stored after a
// manager restart; Record is idempotent.
func rememberDenial(ctx context.Context, r client.Reader, cd *actuation.DenyCooldown, cr *wbv1.ConsentRequest) error {
	d := &cr.Spec.Descriptor
	if cd == nil || d.Requester == "" || cr.Status.Decision != wbv1.DecisionDenied || cr.Status.DecidedAt == nil {
		return nil
	}
	pol, err := convert.ReadConsentPolicy(ctx, r)
	if err != nil {
		return err
	}
	cd.Record(cr.Namespace, d.Requester, actuation.CooldownArgvDigest(d.Argv), cr.Status.DecidedAt.Time, pol.Cooldown())
	return nil
}

// durableNotGrantable refuses a remembered grant the policy does not (or no longer) lets be
// given for its request's capability and profile: the fact stays, it stops authorizing.
func durableNotGrantable(ctx context.Context, r client.Reader, g *wbv1.ConsentGrant, cr *wbv1.ConsentRequest) (*actuation.Refusal, error) {
	if !actuation.DurableScope(actuation.ConsentScope(g.Spec.Scope)) {
		return nil, nil
	}
	pol, err := convert.ReadConsentPolicy(ctx, r)
	if err != nil {
		return nil, err
	}
	d := &cr.Spec.Descriptor
	return pol.DurableGrantable(string(d.Capability), g.Namespace, string(d.ProfileRef)), nil
}

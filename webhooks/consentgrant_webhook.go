package webhooks

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// MaxGrantLifetime caps how far in the future a remembered grant may expire.
const MaxGrantLifetime = 30 * 24 * time.Hour

// +kubebuilder:webhook:path=/mutate-workbench-sensorium-dev-v1alpha1-consentgrant,mutating=true,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=consentgrants,verbs=create,versions=v1alpha1,name=mconsentgrant.workbench.sensorium.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-consentgrant,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=consentgrants,verbs=create;update,versions=v1alpha1,name=vconsentgrant.workbench.sensorium.dev,admissionReviewVersions=v1

// ConsentGrantStamper overwrites the operator identity with the admission request's user, so
// a client can never choose it.
// It also stamps the UID of the request the grant answers, so the grant decides only that
// request object and never a later one that reuses its name.
type ConsentGrantStamper struct {
	Reader client.Reader
}

// Default implements admission.Defaulter.
func (s ConsentGrantStamper) Default(ctx context.Context, obj *wbv1.ConsentGrant) error {
	var cr wbv1.ConsentRequest
	user, groups, found, err := consentGranter.stamp(ctx, s.Reader, obj.Name, obj.Namespace, string(obj.Spec.RequestRef), &cr)
	if err != nil {
		return err
	}
	obj.Spec.Operator, obj.Spec.OperatorGroups, obj.Spec.RequestUID = user, groups, ""
	if found {
		obj.Spec.RequestUID = cr.UID
	}
	return nil
}

// ConsentGrantValidator admits a grant only from a subject allowed to approve consent
// requests (SubjectAccessReview), for a pending request that offered the chosen scope, with
// a bounded prefix and expiry. A grant can only add argv shapes; the profile's safety caps
// stay as they are.
type ConsentGrantValidator struct{ grantDeps }

func setupConsentGrant(mgr ctrl.Manager) error {
	return setupGrant(mgr, &wbv1.ConsentGrant{},
		func(r client.Reader) admission.Defaulter[*wbv1.ConsentGrant] { return ConsentGrantStamper{Reader: r} },
		func(d grantDeps) admission.Validator[*wbv1.ConsentGrant] { return ConsentGrantValidator{d} })
}

// ValidateCreate implements admission.Validator.
func (v ConsentGrantValidator) ValidateCreate(ctx context.Context, g *wbv1.ConsentGrant) (admission.Warnings, error) {
	if err := consentGranter.create(ctx, v.Authz, g.Name, g.Namespace, g.Spec.Operator); err != nil {
		return nil, err
	}
	specPath := field.NewPath("spec")
	var cr wbv1.ConsentRequest
	if found, err := lookup(ctx, v.Reader, "ConsentRequest", g.Namespace, g.Spec.RequestRef, &cr, ""); err != nil || !found {
		if err == nil {
			err = invalid("ConsentGrant", g.Name, field.ErrorList{field.Invalid(specPath.Child("requestRef"), g.Spec.RequestRef,
				string(actuation.CodeConsentScopeInvalid)+": the consent request does not exist")})
		}
		return nil, err
	}
	var errs field.ErrorList
	if g.Spec.RequestUID != cr.UID {
		errs = append(errs, field.Invalid(specPath.Child("requestUID"), g.Spec.RequestUID, string(actuation.CodeConsentScopeInvalid)+": must be the UID of the request answered ("+string(cr.UID)+")"))
	}
	switch decision := wbv1.ConsentDecisionFor(cr.Status.Conditions); decision {
	case wbv1.DecisionPending:
	case wbv1.DecisionExpired:
		errs = append(errs, field.Invalid(specPath.Child("requestRef"), g.Spec.RequestRef, string(actuation.CodeConsentExpired)+": the request expired (fail closed)"))
	default:
		errs = append(errs, field.Invalid(specPath.Child("requestRef"), g.Spec.RequestRef, string(actuation.CodeConsentScopeInvalid)+": the request is already "+string(decision)))
	}
	if ref, err := durableNotGrantable(ctx, v.Reader, g, &cr.Spec.Descriptor); err != nil {
		return nil, err
	} else if ref != nil {
		// before the options: a request asked under a policy that hid remembered scopes is
		// refused with why they were hidden
		return nil, invalid("ConsentGrant", g.Name, append(errs, refusalErrors(specPath, one(ref))...))
	}
	if !slices.Contains(cr.Spec.Options, g.Spec.Scope) {
		errs = append(errs, field.NotSupported(specPath.Child("scope"), g.Spec.Scope, scopes(cr.Spec.Options)))
		errs[len(errs)-1].Detail = string(actuation.CodeConsentScopeInvalid) + ": " + errs[len(errs)-1].Detail
	}
	d := &cr.Spec.Descriptor
	if n := g.Spec.PrefixLength; n != nil && int(*n) > len(d.Argv) {
		errs = append(errs, field.Invalid(specPath.Child("prefixLength"), *n, string(actuation.CodeConsentScopeInvalid)+": must not exceed the reviewed argv's length"))
	}
	if exp := g.Spec.ExpiresAt; exp != nil {
		now := v.Now()
		if !exp.After(now) || exp.Sub(now) > MaxGrantLifetime {
			errs = append(errs, field.Invalid(specPath.Child("expiresAt"), exp.String(), string(actuation.CodeConsentScopeInvalid)+": must be in the future and within "+MaxGrantLifetime.String()))
		}
	}
	if len(errs) == 0 && g.Spec.Scope != wbv1.ConsentDeny && d.Capability == wbv1.CapabilityTerminalCommand {
		var prof wbv1.CommandProfile
		if found, err := lookup(ctx, v.Reader, "CommandProfile", g.Namespace, d.ProfileRef, &prof, ""); err != nil || !found {
			if err == nil {
				err = invalid("ConsentGrant", g.Name, field.ErrorList{field.Invalid(specPath.Child("requestRef"), g.Spec.RequestRef, string(actuation.CodeProfileMissing)+": the request's profile no longer exists")})
			}
			return nil, err
		}
		errs = append(errs, refusalErrors(specPath, one(actuation.ValidateConsentEntry(convert.Profile(&prof.Spec), convert.Entry(g.Namespace, g, d))))...)
	}
	return nil, invalid("ConsentGrant", g.Name, errs)
}

// ValidateUpdate implements admission.Validator: only revoked may change (CEL), and
// revoking is an operator's act too.
func (v ConsentGrantValidator) ValidateUpdate(ctx context.Context, old, g *wbv1.ConsentGrant) (admission.Warnings, error) {
	return nil, consentGranter.update(ctx, v.Authz, g.Name, g.Namespace, nil)
}

// ValidateDelete implements admission.Validator.
func (ConsentGrantValidator) ValidateDelete(context.Context, *wbv1.ConsentGrant) (admission.Warnings, error) {
	return nil, nil
}

func scopes(in []wbv1.ConsentScope) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		out = append(out, string(s))
	}
	return out
}

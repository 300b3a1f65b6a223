package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-consentrequest,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=consentrequests,verbs=create,versions=v1alpha1,name=vconsentrequest.workbench.sensorium.dev,admissionReviewVersions=v1

// ConsentRequestValidator admits ConsentRequests (created by the manager): the argv digest
// must be the digest of the descriptor's argv, cwd and profile.
type ConsentRequestValidator struct{}

// ValidateCreate implements admission.Validator.
func (ConsentRequestValidator) ValidateCreate(ctx context.Context, obj *wbv1.ConsentRequest) (admission.Warnings, error) {
	return nil, specRefusals(ctx, "ConsentRequest", obj.Name, func() field.ErrorList { return validateDescriptor(&obj.Spec.Descriptor) })
}

// validateDescriptor checks the reviewed argv's shape and cwd, and that the argv digest is
// the digest of the descriptor's argv, cwd and profile.
func validateDescriptor(d *wbv1.ConsentDescriptor) field.ErrorList {
	descPath := field.NewPath("spec", "descriptor")
	errs := refusalErrors(descPath.Child("argv"), actuation.ValidateArgvShape(d.Argv))
	errs = append(errs, pathErrors(descPath.Child("cwd", "path"), string(d.Cwd.Path), false)...)
	if len(errs) == 0 {
		if want := actuation.ArgvDigest(string(d.ProfileRef), d.Argv, convert.Cwd(d.Cwd)); want != string(d.ArgvDigest) {
			errs = append(errs, field.Invalid(descPath.Child("argvDigest"), d.ArgvDigest, string(actuation.CodeDigestMismatch)+": must be "+want))
		}
	}
	return errs
}

// ValidateUpdate implements admission.Validator (the spec is immutable by CEL).
func (ConsentRequestValidator) ValidateUpdate(context.Context, *wbv1.ConsentRequest, *wbv1.ConsentRequest) (admission.Warnings, error) {
	return nil, nil
}

// ValidateDelete implements admission.Validator.
func (ConsentRequestValidator) ValidateDelete(context.Context, *wbv1.ConsentRequest) (admission.Warnings, error) {
	return nil, nil
}

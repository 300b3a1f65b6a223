package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-commandprofile,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=commandprofiles,verbs=create;update,versions=v1alpha1,name=vcommandprofile.workbench.sensorium.dev,admissionReviewVersions=v1

// CommandProfileValidator admits CommandProfiles: an absolute executable, no shell or
// inline-code shape, non-empty roots, no forbidden environment keys.
type CommandProfileValidator struct{}

// ValidateCreate implements admission.Validator.
func (CommandProfileValidator) ValidateCreate(ctx context.Context, obj *wbv1.CommandProfile) (admission.Warnings, error) {
	return validateCommandProfile(ctx, obj)
}

// ValidateUpdate implements admission.Validator.
func (CommandProfileValidator) ValidateUpdate(ctx context.Context, _, obj *wbv1.CommandProfile) (admission.Warnings, error) {
	return validateCommandProfile(ctx, obj)
}

// ValidateDelete implements admission.Validator.
func (CommandProfileValidator) ValidateDelete(context.Context, *wbv1.CommandProfile) (admission.Warnings, error) {
	return nil, nil
}

func validateCommandProfile(ctx context.Context, obj *wbv1.CommandProfile) (admission.Warnings, error) {
	req, err := nodeRestrictedRequest(ctx, "CommandProfile", obj.Name)
	if err != nil {
		return nil, err
	}
	if isStatus(req) {
		return nil, nil
	}
	return nil, invalid("CommandProfile", obj.Name, refusalErrors(field.NewPath("spec"), actuation.ValidateProfile(convert.Profile(&obj.Spec))))
}

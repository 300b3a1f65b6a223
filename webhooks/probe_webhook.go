package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-probe,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=probes,verbs=create;update,versions=v1alpha1,name=vprobe.workbench.sensorium.dev,admissionReviewVersions=v1

// ProbeValidator admits Probes with the same condition rules as Waits.
type ProbeValidator struct{}

// ValidateCreate implements admission.Validator.
func (ProbeValidator) ValidateCreate(ctx context.Context, obj *wbv1.Probe) (admission.Warnings, error) {
	return nil, specRefusals(ctx, "Probe", obj.Name, func() field.ErrorList {
		return validateCondition(field.NewPath("spec"), obj.Spec.Scope, &obj.Spec.Condition)
	})
}

// ValidateUpdate implements admission.Validator.
func (ProbeValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.Probe) (admission.Warnings, error) {
	return nodeRestricted(ctx, "Probe", obj.Name)
}

// ValidateDelete implements admission.Validator.
func (ProbeValidator) ValidateDelete(context.Context, *wbv1.Probe) (admission.Warnings, error) {
	return nil, nil
}

package webhooks

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-workbenchnode,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=workbenchnodes;workbenchnodes/status,verbs=create;update,versions=v1alpha1,name=vworkbenchnode.workbench.sensorium.dev,admissionReviewVersions=v1

// WorkbenchNodeValidator lets a node identity write only the WorkbenchNode named after its
// own node.
type WorkbenchNodeValidator struct{}

// ValidateCreate implements admission.Validator.
func (WorkbenchNodeValidator) ValidateCreate(ctx context.Context, obj *wbv1.WorkbenchNode) (admission.Warnings, error) {
	req, err := request(ctx)
	if err != nil {
		return nil, err
	}
	return nil, ownNodeOnly(req, "WorkbenchNode", obj.Name, obj.Name)
}

// ValidateUpdate implements admission.Validator.
func (v WorkbenchNodeValidator) ValidateUpdate(ctx context.Context, _, obj *wbv1.WorkbenchNode) (admission.Warnings, error) {
	return v.ValidateCreate(ctx, obj)
}

// ValidateDelete implements admission.Validator.
func (WorkbenchNodeValidator) ValidateDelete(context.Context, *wbv1.WorkbenchNode) (admission.Warnings, error) {
	return nil, nil
}

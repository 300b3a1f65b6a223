package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-backendcapability,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=backendcapabilities;backendcapabilities/status,verbs=create;update,versions=v1alpha1,name=vbackendcapability.workbench.sensorium.dev,admissionReviewVersions=v1

// BackendCapabilityValidator admits capability descriptors from the closed vocabulary, and
// lets a node identity write only its own node's descriptors.
type BackendCapabilityValidator struct{}

// ValidateCreate implements admission.Validator.
func (v BackendCapabilityValidator) ValidateCreate(ctx context.Context, obj *wbv1.BackendCapability) (admission.Warnings, error) {
	return v.validate(ctx, obj.Spec.NodeName, obj)
}

// ValidateUpdate implements admission.Validator.
func (v BackendCapabilityValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.BackendCapability) (admission.Warnings, error) {
	if old.Spec.NodeName != obj.Spec.NodeName {
		return nil, invalid("BackendCapability", obj.Name, field.ErrorList{field.Forbidden(field.NewPath("spec", "nodeName"), string(actuation.CodeImmutable)+": nodeName may not change")})
	}
	return v.validate(ctx, old.Spec.NodeName, obj)
}

// ValidateDelete implements admission.Validator.
func (BackendCapabilityValidator) ValidateDelete(context.Context, *wbv1.BackendCapability) (admission.Warnings, error) {
	return nil, nil
}

func (BackendCapabilityValidator) validate(ctx context.Context, boundNode string, obj *wbv1.BackendCapability) (admission.Warnings, error) {
	req, err := request(ctx)
	if err != nil {
		return nil, err
	}
	if err := ownNodeOnly(req, "BackendCapability", obj.Name, boundNode); err != nil {
		return nil, err
	}
	return nil, invalid("BackendCapability", obj.Name, refusalErrors(field.NewPath("spec"), actuation.ValidateCapability(convert.Capability(&obj.Spec))))
}

// ownNodeOnly lets a node identity write an object only when it belongs to its own node.
func ownNodeOnly(req admission.Request, kind, name, objectNode string) error {
	node, isNode := NodeIdentity(req.UserInfo)
	if isNode && (node == "" || node != objectNode) {
		return forbidden(kind, name, actuation.CodeNodeRestricted, "node %q may write only its own node's %s objects, not %q's", node, kind, objectNode)
	}
	return nil
}

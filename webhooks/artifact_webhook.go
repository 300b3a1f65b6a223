package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-artifact,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=artifacts,verbs=create;update,versions=v1alpha1,name=vartifact.workbench.sensorium.dev,admissionReviewVersions=v1

// ArtifactValidator admits Artifacts. Node agents create them for captures and exports, so
// a node identity may create an Artifact labelled with its own node.
type ArtifactValidator struct{}

// ValidateCreate implements admission.Validator.
func (ArtifactValidator) ValidateCreate(ctx context.Context, obj *wbv1.Artifact) (admission.Warnings, error) {
	req, err := request(ctx)
	if err != nil {
		return nil, err
	}
	if node, isNode := NodeIdentity(req.UserInfo); isNode && (node == "" || obj.Labels[wbv1.NodeLabel] != node) {
		return nil, forbidden("Artifact", obj.Name, actuation.CodeNodeRestricted, "node %q may create only artifacts labelled with its own node", node)
	}
	var errs field.ErrorList
	if obj.Spec.Path != nil {
		errs = pathErrors(field.NewPath("spec", "path"), string(*obj.Spec.Path), false)
	}
	return nil, invalid("Artifact", obj.Name, errs)
}

// ValidateUpdate implements admission.Validator.
func (ArtifactValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.Artifact) (admission.Warnings, error) {
	return nodeRestricted(ctx, "Artifact", obj.Name)
}

// ValidateDelete implements admission.Validator.
func (ArtifactValidator) ValidateDelete(context.Context, *wbv1.Artifact) (admission.Warnings, error) {
	return nil, nil
}

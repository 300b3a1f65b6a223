package webhooks

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-imagemanifest,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=imagemanifests;imagemanifests/status,verbs=create;update,versions=v1alpha1,name=vimagemanifest.workbench.sensorium.dev,admissionReviewVersions=v1

// ImageManifestValidator admits image manifests whose file paths stay beneath the node
// agent's image directory.
type ImageManifestValidator struct{}

// ValidateCreate implements admission.Validator.
func (ImageManifestValidator) ValidateCreate(ctx context.Context, obj *wbv1.ImageManifest) (admission.Warnings, error) {
	req, err := request(ctx)
	if err != nil {
		return nil, err
	}
	if _, isNode := NodeIdentity(req.UserInfo); isNode && !isStatus(req) {
		return nil, forbidden("ImageManifest", obj.Name, actuation.CodeNodeRestricted, "node agents may not write image manifests")
	}
	var errs field.ErrorList
	full := false
	for _, v := range obj.Spec.Variants {
		full = full || v.Disk != nil
	}
	if full {
		if missing := actuation.MissingImageEquivalence(imageEquivalence(obj)); len(missing) > 0 {
			return nil, forbidden("ImageManifest", obj.Name, actuation.CodeImageInvalid,
				"a manifest with a full-system variant (a disk) must carry the equivalence fields; missing: %s", strings.Join(missing, ", "))
		}
	}
	for i, v := range obj.Spec.Variants {
		p := field.NewPath("spec", "variants").Index(i)
		for name, f := range map[string]*wbv1.ImageFile{"kernel": v.Kernel, "initrd": v.Initrd, "firmware": v.Firmware, "disk": v.Disk} {
			if f != nil {
				errs = append(errs, pathErrors(p.Child(name, "path"), string(f.Path), true)...)
			}
		}
	}
	return nil, invalid("ImageManifest", obj.Name, errs)
}

// ValidateUpdate implements admission.Validator. A node agent writes status only, and of
// status only its own entries of verifiedOn: no node can report another node's
// verification (imagemanifest_verified.go).
func (v ImageManifestValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.ImageManifest) (admission.Warnings, error) {
	if err := nodeOwnVerifications(ctx, old, obj); err != nil {
		return nil, err
	}
	return v.ValidateCreate(ctx, obj)
}

// ValidateDelete implements admission.Validator.
func (ImageManifestValidator) ValidateDelete(context.Context, *wbv1.ImageManifest) (admission.Warnings, error) {
	return nil, nil
}

// imageEquivalence is the manifest's equivalence fields for the actuation rule.
func imageEquivalence(m *wbv1.ImageManifest) actuation.ImageEquivalence {
	d := m.Spec.Digests
	return actuation.ImageEquivalence{Userspace: string(d.Userspace), SBOM: string(d.SBOM), Provenance: string(d.Provenance),
		ProvenanceRef: d.ProvenanceRef, Agent: string(d.Agent), Protocol: string(d.Protocol)}
}

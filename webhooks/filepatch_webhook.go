package webhooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-filepatch,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=filepatches;filepatches/status,verbs=create;update,versions=v1alpha1,name=vfilepatch.workbench.sensorium.dev,admissionReviewVersions=v1

// FilePatchValidator admits FilePatches: the declared digest matches the content, paths stay
// beneath the root, no delete unless allowed, at most maxChangedFiles. Approval is an
// operator's act: changing spec.approval needs the virtual verb approve on filepatches.
type FilePatchValidator struct{ Authz Authorizer }

func setupFilePatch(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &wbv1.FilePatch{}).
		WithValidator(FilePatchValidator{Authz: Authorizer{Client: mgr.GetClient()}}).Complete()
}

// ValidateCreate implements admission.Validator.
func (v FilePatchValidator) ValidateCreate(ctx context.Context, obj *wbv1.FilePatch) (admission.Warnings, error) {
	req, err := request(ctx)
	if err != nil {
		return nil, err
	}
	if err := nodeRestriction(req, "FilePatch", obj.Name, obj.Labels); err != nil {
		return nil, err
	}
	if obj.Spec.Approval != "" && obj.Spec.Approval != "Pending" {
		if err := v.requireApprover(ctx, req, obj); err != nil {
			return nil, err
		}
	}
	return nil, invalid("FilePatch", obj.Name, validatePatchSpec(&obj.Spec))
}

// ValidateUpdate implements admission.Validator.
func (v FilePatchValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.FilePatch) (admission.Warnings, error) {
	req, err := request(ctx)
	if err != nil {
		return nil, err
	}
	if err := nodeRestriction(req, "FilePatch", obj.Name, old.Labels); err != nil {
		return nil, err
	}
	if !isStatus(req) && old.Spec.Approval != obj.Spec.Approval {
		return nil, v.requireApprover(ctx, req, obj)
	}
	return nil, nil
}

// ValidateDelete implements admission.Validator.
func (FilePatchValidator) ValidateDelete(context.Context, *wbv1.FilePatch) (admission.Warnings, error) {
	return nil, nil
}

func (v FilePatchValidator) requireApprover(ctx context.Context, req admission.Request, obj *wbv1.FilePatch) error {
	ok, err := v.Authz.Allowed(ctx, req.UserInfo.Username, req.UserInfo.Groups, req.UserInfo.Extra, req.UserInfo.UID, "approve", "filepatches", obj.Namespace)
	if err != nil {
		return err
	}
	if !ok {
		return forbidden("FilePatch", obj.Name, actuation.CodeConsentNotOperator, "user %q may not approve file patches in %q", req.UserInfo.Username, obj.Namespace)
	}
	return nil
}

// PatchDigest is the digest a FilePatch declares: sha256 of the inline unified diff, or of
// the canonical JSON (RFC 8785) of the structured operations.
func PatchDigest(spec *wbv1.FilePatchSpec) (string, error) {
	if spec.Format == wbv1.PatchFormatUnified && spec.Patch != nil {
		sum := sha256.Sum256([]byte(*spec.Patch))
		return "sha256:" + hex.EncodeToString(sum[:]), nil
	}
	return actuation.Digest(spec.Operations)
}

func validatePatchSpec(spec *wbv1.FilePatchSpec) field.ErrorList {
	var errs field.ErrorList
	specPath := field.NewPath("spec")
	if spec.Patch != nil || spec.Format == wbv1.PatchFormatStructured {
		got, err := PatchDigest(spec)
		if err != nil {
			errs = append(errs, field.InternalError(specPath.Child("digest"), err))
		} else if got != string(spec.Digest) {
			errs = append(errs, field.Invalid(specPath.Child("digest"), spec.Digest, string(actuation.CodeDigestMismatch)+": the content's digest is "+got))
		}
	}
	allowDelete := spec.Policy.AllowDelete != nil && *spec.Policy.AllowDelete
	allowCreate := spec.Policy.AllowCreate != nil && *spec.Policy.AllowCreate
	for i, op := range spec.Operations {
		p := specPath.Child("operations").Index(i)
		if r := actuation.ValidateRelativePath(string(op.Path), true); r != nil {
			errs = append(errs, field.Invalid(p.Child("path"), op.Path, string(actuation.CodePatchOutsideRoot)+": "+string(r.Code)+": "+r.Message))
		}
		switch {
		case op.Op == "delete" && !allowDelete:
			errs = append(errs, field.Forbidden(p.Child("op"), string(actuation.CodePatchDeleteForbidden)+": delete is not allowed by the patch policy"))
		case op.Op == "create" && !allowCreate:
			errs = append(errs, field.Forbidden(p.Child("op"), string(actuation.CodePatchCreateForbidden)+": create is not allowed by the patch policy"))
		case op.Op != "delete" && op.Content == nil:
			errs = append(errs, field.Required(p.Child("content"), string(actuation.CodePatchInvalid)+": "+string(op.Op)+" needs content"))
		}
	}
	if max := spec.Policy.MaxChangedFiles; max != nil && len(spec.Operations) > int(*max) {
		errs = append(errs, field.TooMany(specPath.Child("operations"), len(spec.Operations), int(*max)))
		errs[len(errs)-1].Detail = string(actuation.CodePatchTooManyFiles) + ": " + errs[len(errs)-1].Detail
	}
	return errs
}

package webhooks

import (
	"context"
	"io/fs"

	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-filepatch,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=filepatches,verbs=create;update,versions=v1alpha1,name=vfilepatch.workbench.sensorium.dev,admissionReviewVersions=v1

// FilePatchValidator admits FilePatches: the declared digest matches the content, paths stay
// beneath the root, no delete unless allowed, at most maxChangedFiles. Approval is an
// operator's act: changing spec.approval needs the virtual verb approve on filepatches.
// Where the Environment exists, its host-owned spec.patchPolicy caps the patch's own
// policy (patch-policy-exceeds-environment) and structured operations touching git
// metadata are refused (patch-git-metadata-forbidden); the node agent re-checks both, and
// everything that needs the patch's content or the files (unified diffs, modes), before
// it writes.
type FilePatchValidator struct {
	Authz  Authorizer
	Reader client.Reader
}

func setupFilePatch(mgr ctrl.Manager) error {
	return serve[*wbv1.FilePatch](mgr, &wbv1.FilePatch{}, nil, FilePatchValidator{Authz: Authorizer{Client: mgr.GetClient()}, Reader: mgr.GetAPIReader()})
}

// ValidateCreate implements admission.Validator.
func (v FilePatchValidator) ValidateCreate(ctx context.Context, obj *wbv1.FilePatch) (admission.Warnings, error) {
	req, err := nodeRestrictedRequest(ctx, "FilePatch", obj.Name)
	if err != nil {
		return nil, err
	}
	if obj.Spec.Approval != "" && obj.Spec.Approval != "Pending" {
		if err := v.requireApprover(ctx, req, obj); err != nil {
			return nil, err
		}
	}
	errs := validatePatchSpec(&obj.Spec)
	envErrs, err := v.validateAgainstEnvironment(ctx, obj)
	if err != nil {
		return nil, err
	}
	return nil, invalid("FilePatch", obj.Name, append(errs, envErrs...))
}

// validateAgainstEnvironment applies the environment's patch policy where the environment
// exists (a missing one is refused by the node with environment-unavailable).
func (v FilePatchValidator) validateAgainstEnvironment(ctx context.Context, obj *wbv1.FilePatch) (field.ErrorList, error) {
	if v.Reader == nil {
		return nil, nil
	}
	var env wbv1.Environment
	if found, err := lookup(ctx, v.Reader, "Environment", obj.Namespace, obj.Spec.EnvironmentRef, &env, " for FilePatch "+obj.Name); err != nil || !found {
		return nil, err
	}
	return validatePatchAgainstEnvironment(&obj.Spec, &env.Spec), nil
}

func validatePatchAgainstEnvironment(spec *wbv1.FilePatchSpec, envSpec *wbv1.EnvironmentSpec) field.ErrorList {
	eff, r := actuation.CapPatchPolicy(convert.EnvironmentPatchPolicy(envSpec), convert.ProposedPatchPolicy(spec))
	if r != nil {
		return field.ErrorList{field.Forbidden(field.NewPath(r.Field), string(r.Code)+": "+r.Message)}
	}
	var errs field.ErrorList
	for i, op := range spec.Operations {
		// A structured create is 0644; a replace keeps the file's mode: only git metadata
		// can be decided here.
		if r := actuation.CheckPatchTarget(eff, string(op.Path), op.Op != "create", 0, fs.FileMode(0o644)&^0o111); r != nil {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "operations").Index(i).Child("path"), string(r.Code)+": "+r.Message))
		}
	}
	return errs
}

// ValidateUpdate implements admission.Validator.
func (v FilePatchValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.FilePatch) (admission.Warnings, error) {
	req, err := nodeRestrictedRequest(ctx, "FilePatch", obj.Name)
	if err != nil {
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
	return actuation.PatchDigest(spec.InlineUnifiedPatch(), spec.Operations)
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

package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-actioncatalog,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=actioncatalogs,verbs=create;update,versions=v1alpha1,name=vactioncatalog.workbench.sensorium.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-actionrun,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=actionruns,verbs=create;update,versions=v1alpha1,name=vactionrun.workbench.sensorium.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-actionsigner,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=actionsigners,verbs=create;update,versions=v1alpha1,name=vactionsigner.workbench.sensorium.dev,admissionReviewVersions=v1

// ActionCatalogValidator refuses structurally invalid catalogs with the seed's codes. An
// edit of a signed catalog is accepted: it is simply no longer authorized.
type ActionCatalogValidator struct{}

// ActionRunValidator refuses a run that could never be admitted now: missing catalog
// (catalog-entry-missing), unknown action, invalid declaration, failing signature or
// signer scope, posture, timeout, parameters — through actions.Authorize, the same decision
// the manager and the node agent take again later.
type ActionRunValidator struct {
	// Reader reads live (not from the cache): a catalog signed a moment ago must count.
	Reader client.Reader
	Client client.Client
}

// ActionSignerValidator refuses a signer whose key does not decode.
type ActionSignerValidator struct{}

func setupActions(mgr ctrl.Manager) error {
	if err := serve[*wbv1.ActionCatalog](mgr, &wbv1.ActionCatalog{}, nil, ActionCatalogValidator{}); err != nil {
		return err
	}
	if err := serve[*wbv1.ActionSigner](mgr, &wbv1.ActionSigner{}, nil, ActionSignerValidator{}); err != nil {
		return err
	}
	setupActionRunStamper(mgr) // actionrun_mutate.go
	return serve[*wbv1.ActionRun](mgr, &wbv1.ActionRun{}, nil, ActionRunValidator{Reader: mgr.GetAPIReader(), Client: mgr.GetClient()})
}

// ValidateActionCatalog checks a catalog's structure and the shape of its signature.
func ValidateActionCatalog(cat *wbv1.ActionCatalog) field.ErrorList {
	c, _, err := convert.ActionCatalog(cat)
	if err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("spec"), "", string(actuation.CodeActionClassParamsInvalid)+": "+err.Error())}
	}
	errs := refusalErrors(field.NewPath("spec"), actions.ValidateCatalog(c))
	if s := cat.Signature; s != nil {
		if s.SignerRef == "" || s.Value == "" {
			errs = append(errs, field.Invalid(field.NewPath("signature"), "", string(actuation.CodeActionCatalogUnauthorized)+": must name signerRef and carry value"))
		}
	}
	return errs
}

// ValidateCreate implements admission.Validator.
func (ActionCatalogValidator) ValidateCreate(ctx context.Context, obj *wbv1.ActionCatalog) (admission.Warnings, error) {
	return nil, specRefusals(ctx, "ActionCatalog", obj.Name, func() field.ErrorList { return ValidateActionCatalog(obj) })
}

// ValidateUpdate implements admission.Validator.
func (v ActionCatalogValidator) ValidateUpdate(ctx context.Context, _, obj *wbv1.ActionCatalog) (admission.Warnings, error) {
	return v.ValidateCreate(ctx, obj)
}

// ValidateDelete implements admission.Validator.
func (ActionCatalogValidator) ValidateDelete(context.Context, *wbv1.ActionCatalog) (admission.Warnings, error) {
	return nil, nil
}

// ValidateCreate implements admission.Validator.
func (ActionSignerValidator) ValidateCreate(_ context.Context, obj *wbv1.ActionSigner) (admission.Warnings, error) {
	var errs field.ErrorList
	if _, err := actions.ParsePublicKey(obj.Spec.PublicKey); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("spec", "publicKey"), "", string(actuation.CodePolicyInvalid)+": "+err.Error()))
	}
	for i, c := range obj.Spec.Classes {
		if !actions.Class(c).Known() {
			errs = append(errs, field.Invalid(field.NewPath("spec", "classes").Index(i), c, string(actuation.CodeActionClassUnknown)+": must be one of C1..C7"))
		}
	}
	return nil, invalid("ActionSigner", obj.Name, errs)
}

// ValidateUpdate implements admission.Validator.
func (v ActionSignerValidator) ValidateUpdate(ctx context.Context, _, obj *wbv1.ActionSigner) (admission.Warnings, error) {
	return v.ValidateCreate(ctx, obj)
}

// ValidateDelete implements admission.Validator.
func (ActionSignerValidator) ValidateDelete(context.Context, *wbv1.ActionSigner) (admission.Warnings, error) {
	return nil, nil
}

// ValidateCreate implements admission.Validator.
func (v ActionRunValidator) ValidateCreate(ctx context.Context, obj *wbv1.ActionRun) (admission.Warnings, error) {
	if _, err := nodeRestrictedRequest(ctx, "ActionRun", obj.Name); err != nil {
		return nil, err
	}
	d, err := v.Decide(ctx, obj)
	if err != nil {
		return nil, err
	}
	if d.Allowed {
		return nil, nil
	}
	return nil, invalid("ActionRun", obj.Name, refusalErrors(field.NewPath("spec"), one(d.Refusal)))
}

// Decide runs actions.Authorize for a run against the live catalog, signers and policy.
// A missing catalog is catalog-entry-missing.
func (v ActionRunValidator) Decide(ctx context.Context, run *wbv1.ActionRun) (actions.Decision, error) {
	var cat wbv1.ActionCatalog
	if found, err := lookup(ctx, v.Reader, "ActionCatalog", run.Namespace, run.Spec.CatalogRef, &cat, ""); err != nil || !found {
		if err == nil {
			return actions.Decision{Refusal: actuation.Refuse(actuation.CodeCatalogEntryMissing, "spec.catalogRef", "catalog %s does not exist in %s", run.Spec.CatalogRef, run.Namespace)}, nil
		}
		return actions.Decision{}, err
	}
	signers, pol, err := convert.ActionAuthority(ctx, v.Reader)
	if err != nil {
		return actions.Decision{}, err
	}
	in, err := convert.AuthorizeRun(&cat, run, signers, pol)
	if err != nil {
		return actions.Decision{}, err
	}
	return actions.Authorize(in), nil
}

// ValidateUpdate implements admission.Validator: status writes are node-restricted; a
// proposer may only cancel.
func (v ActionRunValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.ActionRun) (admission.Warnings, error) {
	return nil, proposedUpdate(ctx, v.Client, "ActionRun", "actionruns", old, obj, true, nil)
}

// ValidateDelete implements admission.Validator.
func (ActionRunValidator) ValidateDelete(context.Context, *wbv1.ActionRun) (admission.Warnings, error) {
	return nil, nil
}

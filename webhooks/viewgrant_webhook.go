package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/views"
)

// VerbGrant is the virtual verb on terminalviews that allows creating and revoking
// ViewGrants (checked with SubjectAccessReview; the API server never serves it).
const VerbGrant = "grant"

// +kubebuilder:webhook:path=/mutate-workbench-sensorium-dev-v1alpha1-viewgrant,mutating=true,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=viewgrants,verbs=create,versions=v1alpha1,name=mviewgrant.workbench.sensorium.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-viewgrant,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=viewgrants,verbs=create;update,versions=v1alpha1,name=vviewgrant.workbench.sensorium.dev,admissionReviewVersions=v1

// ViewGrantStamper overwrites the granting identity with the admission request's user (as
// ConsentGrant's operator), stamps the UID of the view the grant covers, and labels the
// grant with the view's node so only that node's agent watches it.
type ViewGrantStamper struct {
	Reader client.Reader
}

// Default implements admission.Defaulter.
func (s ViewGrantStamper) Default(ctx context.Context, g *wbv1.ViewGrant) error {
	var v wbv1.TerminalView
	user, groups, found, err := viewGranter.stamp(ctx, s.Reader, g.Name, g.Namespace, string(g.Spec.ViewRef), &v)
	if err != nil {
		return err
	}
	g.Spec.GrantedBy, g.Spec.GrantedByGroups, g.Spec.ViewUID = user, groups, ""
	if !found {
		return nil
	}
	g.Spec.ViewUID = v.UID
	if node := v.Labels[wbv1.NodeLabel]; node != "" {
		if g.Labels == nil {
			g.Labels = map[string]string{}
		}
		g.Labels[wbv1.NodeLabel] = node
	}
	return nil
}

// ViewGrantValidator admits a grant only from a subject allowed the virtual verb grant on
// terminalviews, for an existing view, naming exactly one subject, expiring within
// views.MaxGrantLifetime. Revoking needs the same verb; node agents write only status.
type ViewGrantValidator struct{ grantDeps }

func setupViewGrant(mgr ctrl.Manager) error {
	return setupGrant(mgr, &wbv1.ViewGrant{},
		func(r client.Reader) admission.Defaulter[*wbv1.ViewGrant] { return ViewGrantStamper{Reader: r} },
		func(d grantDeps) admission.Validator[*wbv1.ViewGrant] { return ViewGrantValidator{d} })
}

// ValidateCreate implements admission.Validator.
func (v ViewGrantValidator) ValidateCreate(ctx context.Context, g *wbv1.ViewGrant) (admission.Warnings, error) {
	if err := viewGranter.create(ctx, v.Authz, g.Name, g.Namespace, g.Spec.GrantedBy); err != nil {
		return nil, err
	}
	spec := field.NewPath("spec")
	var errs field.ErrorList
	var view wbv1.TerminalView
	if found, err := lookup(ctx, v.Reader, "TerminalView", g.Namespace, g.Spec.ViewRef, &view, ""); err != nil {
		return nil, err
	} else if !found {
		errs = append(errs, field.Invalid(spec.Child("viewRef"), g.Spec.ViewRef, string(actuation.CodeViewGrantMissing)+": the terminal view does not exist"))
	} else if g.Spec.ViewUID != view.UID {
		errs = append(errs, field.Invalid(spec.Child("viewUID"), g.Spec.ViewUID, string(actuation.CodeViewGrantMissing)+": must be the UID of the view granted ("+string(view.UID)+")"))
	}
	sub := g.Spec.Subject
	if r := views.ValidateSubject(views.Subject{Kind: string(sub.Kind), Name: sub.Name, Namespace: sub.Namespace}); r != nil {
		errs = append(errs, field.Invalid(spec.Child("subject", r.Field), sub, string(r.Code)+": "+r.Message))
	}
	if r := views.ValidateLifetime(g.Spec.ExpiresAt.Time, v.Now()); r != nil {
		errs = append(errs, field.Invalid(spec.Child("expiresAt"), g.Spec.ExpiresAt.String(), string(r.Code)+": "+r.Message))
	}
	if g.Spec.Revoked != nil && *g.Spec.Revoked {
		errs = append(errs, field.Invalid(spec.Child("revoked"), true, string(actuation.CodeViewGrantRevoked)+": a grant may not be created revoked"))
	}
	return nil, invalid("ViewGrant", g.Name, errs)
}

// ValidateUpdate implements admission.Validator: only revoked may change (CEL), and revoking
// is a granter's act too; status belongs to the view's node.
func (v ViewGrantValidator) ValidateUpdate(ctx context.Context, _, g *wbv1.ViewGrant) (admission.Warnings, error) {
	return nil, viewGranter.update(ctx, v.Authz, g.Name, g.Namespace, func(req admission.Request) error {
		return nodeRestriction(req, "ViewGrant", g.Name)
	})
}

// ValidateDelete implements admission.Validator.
func (ViewGrantValidator) ValidateDelete(context.Context, *wbv1.ViewGrant) (admission.Warnings, error) {
	return nil, nil
}

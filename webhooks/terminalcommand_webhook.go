package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-terminalcommand,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=terminalcommands,verbs=update,versions=v1alpha1,name=vterminalcommand.workbench.sensorium.dev,admissionReviewVersions=v1

// TerminalCommandValidator refuses malformed command intents outright: shell strings, bad
// argv, bad cwd paths, forbidden environment keys, and timeout, output or env overrides
// beyond the named profile. A well-formed argv the profile does not admit is accepted here;
// the manager then holds it for consent (or refuses it) — admission by argv is not a
// malformation.
//
// On create its rules run inside the mutating webhook (TerminalCommandBinder.Handle calls
// ValidateCreate before it binds): one webhook call per create instead of two, the rules
// still in one place. The validating webhook is registered for updates only.
//
// The profile is read from the manager's informer cache: admission stays one API round trip
// cheaper, and a profile the cache has not seen yet only skips these early checks — the
// consent gate re-checks the same rules against the live profile before admitting.
type TerminalCommandValidator struct {
	Reader client.Reader
	// Client creates SubjectAccessReviews.
	Client client.Client
}

func setupTerminalCommand(mgr ctrl.Manager) error {
	v := TerminalCommandValidator{Reader: mgr.GetClient(), Client: mgr.GetClient()}
	mgr.GetWebhookServer().Register(terminalCommandMutatePath, &admission.Webhook{
		Handler: TerminalCommandBinder{Reader: mgr.GetClient(), Validator: v, Decoder: admission.NewDecoder(mgr.GetScheme())},
	})
	return serve(mgr, &wbv1.TerminalCommand{}, nil, admission.Validator[*wbv1.TerminalCommand](v))
}

// ValidateCreate implements admission.Validator.
func (v TerminalCommandValidator) ValidateCreate(ctx context.Context, obj *wbv1.TerminalCommand) (admission.Warnings, error) {
	if _, err := nodeRestrictedRequest(ctx, "TerminalCommand", obj.Name); err != nil {
		return nil, err
	}
	errs := ValidateCommandShape(&obj.Spec)
	if len(errs) == 0 {
		perr, err := v.againstProfile(ctx, obj)
		if err != nil {
			return nil, err
		}
		errs = perr
	}
	return nil, invalid("TerminalCommand", obj.Name, errs)
}

// ValidateUpdate implements admission.Validator. The spec is immutable (CEL); status writes
// are node-restricted.
// A subject that may not write status (the workbench-agent role) may only cancel.
func (v TerminalCommandValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.TerminalCommand) (admission.Warnings, error) {
	return nil, proposedUpdate(ctx, v.Client, "TerminalCommand", "terminalcommands", old, obj, true, nil)
}

// ValidateDelete implements admission.Validator.
func (TerminalCommandValidator) ValidateDelete(context.Context, *wbv1.TerminalCommand) (admission.Warnings, error) {
	return nil, nil
}

// ValidateCommandShape checks what needs no other object: argv shape, cwd path, env keys.
func ValidateCommandShape(spec *wbv1.TerminalCommandSpec) field.ErrorList {
	specPath := field.NewPath("spec")
	errs := refusalErrors(specPath.Child("argv"), actuation.ValidateArgvShape(spec.Argv))
	errs = append(errs, pathErrors(specPath.Child("cwd", "path"), string(spec.Cwd.Path), false)...)
	errs = append(errs, refusalErrors(specPath, actuation.ValidateCommandCeilings(spec.TimeoutSeconds, spec.OutputBytes))...)
	for i, e := range spec.Env {
		errs = append(errs, refusalErrors(specPath.Child("env").Index(i), actuation.ValidateEnvVar(actuation.EnvVar{Name: e.Name, Value: e.Value}))...)
	}
	return errs
}

// againstProfile checks caps and cwd/env policy against the named profile when it exists.
// A missing profile is not a malformation: the manager refuses with profile-missing.
func (v TerminalCommandValidator) againstProfile(ctx context.Context, obj *wbv1.TerminalCommand) (field.ErrorList, error) {
	var prof wbv1.CommandProfile
	if found, err := lookup(ctx, v.Reader, "CommandProfile", obj.Namespace, obj.Spec.ProfileRef, &prof, ""); err != nil || !found {
		return nil, err
	}
	// The core's one admission pipeline, against the profile alone (no grants: consent is
	// decided later): what it finds malformed no operator could admit.
	d := actuation.AdmitCommand(convert.Profile(&prof.Spec), nil, convert.Intent(&obj.Spec), actuation.Subject{Ref: obj.Name}, nil)
	if !d.Malformed {
		return nil, nil
	}
	return refusalErrors(field.NewPath("spec"), d.Problems), nil
}

package webhooks

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/views"
)

// +kubebuilder:webhook:path=/mutate-workbench-sensorium-dev-v1alpha1-terminalview,mutating=true,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=terminalviews,verbs=create;update,versions=v1alpha1,name=mterminalview.workbench.sensorium.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-terminalview,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=terminalviews,verbs=create;update,versions=v1alpha1,name=vterminalview.workbench.sensorium.dev,admissionReviewVersions=v1

// TerminalViewStamper binds a new view to the exact environment of its session (UID, source
// generation, operational context) and labels it with the session's node, so that node's
// agent, which watches only its own objects, serves it. The binding never changes after
// creation; re-pointing the view to another session re-labels it.
type TerminalViewStamper struct {
	Reader client.Reader
}

// Default implements admission.Defaulter.
func (s TerminalViewStamper) Default(ctx context.Context, v *wbv1.TerminalView) error {
	req, err := request(ctx)
	if err != nil {
		return err
	}
	if isStatus(req) {
		return nil
	}
	var ts wbv1.TerminalSession
	if found, err := lookup(ctx, s.Reader, "TerminalSession", v.Namespace, v.Spec.SessionRef, &ts, " for TerminalView "+v.Name); err != nil || !found {
		return err // not found: the validator refuses
	}
	if node := ts.Labels[wbv1.NodeLabel]; node != "" {
		if v.Labels == nil {
			v.Labels = map[string]string{}
		}
		v.Labels[wbv1.NodeLabel] = node
	}
	if req.Operation != admissionv1.Create {
		return nil
	}
	v.Spec.Binding = nil
	var env wbv1.Environment
	if found, err := lookup(ctx, s.Reader, "Environment", v.Namespace, ts.Spec.EnvironmentRef, &env, " for TerminalView "+v.Name); err != nil || !found {
		return err
	}
	v.Spec.Binding = &wbv1.ViewBinding{
		EnvironmentRef: ts.Spec.EnvironmentRef, EnvironmentUID: env.UID,
		SourceGeneration: env.Status.SourceGeneration, OperationalContext: wbv1.ContextClass(EnvironmentContext(&env)),
	}
	return nil
}

// EnvironmentContext is the environment's operational context now (views.CurrentContext of
// its effective and declared classes).
func EnvironmentContext(env *wbv1.Environment) actuation.ContextClass {
	declared := actuation.ContextClass("")
	if oc := env.Spec.OperationalContext; oc != nil {
		declared = actuation.ContextClass(oc.Class)
	}
	return views.CurrentContext(actuation.ContextClass(env.Status.EffectiveOperationalContext), declared)
}

// TerminalViewValidator admits a view of an existing session whose environment runs with a
// known operational context at or below the view's ceiling; on update the session must stay
// in the bound environment. Node agents may write only the status of views on their node.
type TerminalViewValidator struct {
	Reader client.Reader
}

func setupTerminalView(mgr ctrl.Manager) error {
	return serve[*wbv1.TerminalView](mgr, &wbv1.TerminalView{}, TerminalViewStamper{Reader: mgr.GetAPIReader()}, TerminalViewValidator{Reader: mgr.GetAPIReader()})
}

// ValidateCreate implements admission.Validator.
func (v TerminalViewValidator) ValidateCreate(ctx context.Context, obj *wbv1.TerminalView) (admission.Warnings, error) {
	return nil, v.validate(ctx, obj)
}

// ValidateUpdate implements admission.Validator.
func (v TerminalViewValidator) ValidateUpdate(ctx context.Context, _, obj *wbv1.TerminalView) (admission.Warnings, error) {
	return nil, v.validate(ctx, obj)
}

// ValidateDelete implements admission.Validator.
func (TerminalViewValidator) ValidateDelete(context.Context, *wbv1.TerminalView) (admission.Warnings, error) {
	return nil, nil
}

func (v TerminalViewValidator) validate(ctx context.Context, obj *wbv1.TerminalView) error {
	req, err := nodeRestrictedRequest(ctx, "TerminalView", obj.Name)
	if err != nil {
		return err
	}
	if isStatus(req) {
		return nil
	}
	spec := field.NewPath("spec")
	if obj.Spec.Publish != "" && obj.Spec.Publish != wbv1.ViewPublishScreen {
		return invalid("TerminalView", obj.Name, field.ErrorList{field.NotSupported(spec.Child("publish"), obj.Spec.Publish, []string{string(wbv1.ViewPublishScreen)})})
	}
	var ts wbv1.TerminalSession
	if found, err := lookup(ctx, v.Reader, "TerminalSession", obj.Namespace, obj.Spec.SessionRef, &ts, ""); err != nil || !found {
		if err == nil {
			err = invalid("TerminalView", obj.Name, field.ErrorList{field.Invalid(spec.Child("sessionRef"), obj.Spec.SessionRef,
				string(actuation.CodeSessionMissing)+": the terminal session does not exist")})
		}
		return err
	}
	b := obj.Spec.Binding
	if b == nil {
		return invalid("TerminalView", obj.Name, field.ErrorList{field.Invalid(spec.Child("sessionRef"), obj.Spec.SessionRef,
			string(actuation.CodeEnvironmentUnavailable)+": the session's environment "+string(ts.Spec.EnvironmentRef)+" does not exist")})
	}
	var errs field.ErrorList
	if ts.Spec.EnvironmentRef != b.EnvironmentRef {
		errs = append(errs, field.Invalid(spec.Child("sessionRef"), obj.Spec.SessionRef,
			string(actuation.CodeViewContextSuperseded)+": the session must run in the view's bound environment "+string(b.EnvironmentRef)))
	}
	if req.Operation == admissionv1.Create {
		if c := views.CheckCeiling(actuation.ContextClass(b.OperationalContext), actuation.ContextClass(obj.Spec.ClassificationCeiling)); c != "" {
			errs = append(errs, field.Invalid(spec.Child("classificationCeiling"), obj.Spec.ClassificationCeiling,
				fmt.Sprintf("%s: the environment's operational context %q must be known and at most the ceiling", c, b.OperationalContext)))
		}
		if b.SourceGeneration == 0 {
			errs = append(errs, field.Invalid(spec.Child("sessionRef"), obj.Spec.SessionRef,
				string(actuation.CodeEnvironmentUnavailable)+": the environment has not started yet (no source generation)"))
		}
	}
	return invalid("TerminalView", obj.Name, errs)
}

package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-terminalsession,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=terminalsessions;terminalsessions/status,verbs=create;update,versions=v1alpha1,name=vterminalsession.workbench.sensorium.dev,admissionReviewVersions=v1

// TerminalSessionValidator admits TerminalSessions. Bounds and enums live in the schema;
// this enforces node restriction on status writes.
// A subject that may not write status (the workbench-agent role) may only close a session.
type TerminalSessionValidator struct {
	Client client.Client
}

func setupTerminalSession(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &wbv1.TerminalSession{}).WithValidator(TerminalSessionValidator{Client: mgr.GetClient()}).Complete()
}

// ValidateCreate implements admission.Validator.
func (TerminalSessionValidator) ValidateCreate(ctx context.Context, obj *wbv1.TerminalSession) (admission.Warnings, error) {
	if w, err := nodeRestricted(ctx, "TerminalSession", obj.Name, obj.Labels); err != nil {
		return w, err
	}
	return nil, sessionCeilings(obj)
}

// sessionCeilings refuses durations the node would refuse, with the node's code.
func sessionCeilings(obj *wbv1.TerminalSession) error {
	return invalid("TerminalSession", obj.Name, refusalErrors(field.NewPath("spec"), actuation.ValidateSessionCeilings(obj.Spec.MaxDurationSeconds, obj.Spec.IdleTimeoutSeconds)))
}

// ValidateUpdate implements admission.Validator.
func (v TerminalSessionValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.TerminalSession) (admission.Warnings, error) {
	if w, err := nodeRestricted(ctx, "TerminalSession", obj.Name, old.Labels); err != nil {
		return w, err
	}
	req, err := request(ctx)
	if err != nil {
		return nil, err
	}
	oldSpec, newSpec := old.Spec, obj.Spec
	oldSpec.DesiredState, newSpec.DesiredState = "", ""
	closing := equality.Semantic.DeepEqual(oldSpec, newSpec) &&
		(obj.Spec.DesiredState == old.Spec.DesiredState || obj.Spec.DesiredState == "Closed")
	if err := sessionCeilings(obj); err != nil && !isStatus(req) {
		return nil, err
	}
	return nil, proposerUpdate(ctx, v.Client, req, "TerminalSession", "terminalsessions", old, obj, closing)
}

// ValidateDelete implements admission.Validator.
func (TerminalSessionValidator) ValidateDelete(context.Context, *wbv1.TerminalSession) (admission.Warnings, error) {
	return nil, nil
}

// nodeRestricted applies only the node restriction; labels are the stored object's.
func nodeRestricted(ctx context.Context, kind, name string, labels map[string]string) (admission.Warnings, error) {
	req, err := request(ctx)
	if err != nil {
		return nil, err
	}
	return nil, nodeRestriction(req, kind, name, labels)
}

package webhooks

import (
	"context"
	"net/http"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// +kubebuilder:webhook:path=/mutate-workbench-sensorium-dev-v1alpha1-terminalsession,mutating=true,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=terminalsessions,verbs=create,versions=v1alpha1,name=mterminalsession.workbench.sensorium.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-terminalsession,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=terminalsessions,verbs=create;update,versions=v1alpha1,name=vterminalsession.workbench.sensorium.dev,admissionReviewVersions=v1

// TerminalSessionValidator admits TerminalSessions. Bounds and enums live in the schema;
// this enforces node restriction on status writes.
// A subject that may not write status (the workbench-agent role) may only close a session.
type TerminalSessionValidator struct {
	Client client.Client
}

func setupTerminalSession(mgr ctrl.Manager) error {
	return serve[*wbv1.TerminalSession](mgr, &wbv1.TerminalSession{}, TerminalSessionStamper{}, TerminalSessionValidator{Client: mgr.GetClient()})
}

// TerminalSessionStamper records who created a session — its owner — from the admission
// request, overwriting whatever a client sent: only the owner's commands may write into a
// session that is someone's terminal (actuation.CheckSessionEmitter).
type TerminalSessionStamper struct{}

// Default implements admission.Defaulter.
func (TerminalSessionStamper) Default(ctx context.Context, obj *wbv1.TerminalSession) error {
	req, err := request(ctx)
	if err != nil {
		return err
	}
	obj.Spec.CreatedBy = req.UserInfo.Username
	return nil
}

// ValidateCreate implements admission.Validator.
func (v TerminalSessionValidator) ValidateCreate(ctx context.Context, obj *wbv1.TerminalSession) (admission.Warnings, error) {
	if w, err := nodeRestricted(ctx, "TerminalSession", obj.Name); err != nil {
		return w, err
	}
	if req, err := request(ctx); err != nil {
		return nil, err
	} else if obj.Spec.CreatedBy != req.UserInfo.Username {
		return nil, forbidden("TerminalSession", obj.Name, actuation.CodeImmutable, "spec.createdBy must be the requesting user %q", req.UserInfo.Username)
	}
	if err := sessionCeilings(obj); err != nil {
		return nil, err
	}
	return nil, v.sessionCapacity(ctx, obj)
}

// sessionCapacity refuses, with the node's own code, a session its environment's node has
// published no room for (WorkbenchNode status.free). It is advisory-early: it acts only
// on a placed environment and a Ready node that published its free capacity, and the node
// still refuses what this could not foresee (a slot taken since the count).
func (v TerminalSessionValidator) sessionCapacity(ctx context.Context, obj *wbv1.TerminalSession) error {
	if v.Client == nil {
		return nil
	}
	var env wbv1.Environment
	if err := v.Client.Get(ctx, client.ObjectKey{Namespace: obj.Namespace, Name: string(obj.Spec.EnvironmentRef)}, &env); err != nil {
		return nil // missing or unreadable: the binding controller gives the outcome
	}
	if env.Status.NodeName == "" {
		return nil
	}
	var node wbv1.WorkbenchNode
	if err := v.Client.Get(ctx, client.ObjectKey{Name: env.Status.NodeName}, &node); err != nil {
		return nil
	}
	msg := node.NoSessionRoom(env.Namespace, env.Name)
	if msg == "" {
		return nil
	}
	return capReached("terminalsessions", obj.Name, actuation.CodeSessionCapReached, msg)
}

// capReached is a refusal for a cap reached: HTTP 429 with the code as the first cause's
// reason and as the message's prefix. It carries no retryAfterSeconds, so clients do not
// retry it on their own; WorkbenchNode status.free says when to.
func capReached(resource, name string, code actuation.Code, msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
		Message: string(code) + ": " + msg,
		Details: &metav1.StatusDetails{Group: wbv1.GroupVersion.Group, Kind: resource, Name: name,
			Causes: []metav1.StatusCause{{Type: metav1.CauseType(code), Message: msg}}},
	}}
}

// sessionCeilings refuses durations the node would refuse, with the node's code.
func sessionCeilings(obj *wbv1.TerminalSession) error {
	return invalid("TerminalSession", obj.Name, refusalErrors(field.NewPath("spec"), actuation.ValidateSessionCeilings(obj.Spec.MaxDurationSeconds, obj.Spec.IdleTimeoutSeconds)))
}

// ValidateUpdate implements admission.Validator.
func (v TerminalSessionValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.TerminalSession) (admission.Warnings, error) {
	oldSpec, newSpec := old.Spec, obj.Spec
	oldSpec.DesiredState, newSpec.DesiredState = "", ""
	closing := equality.Semantic.DeepEqual(oldSpec, newSpec) &&
		(obj.Spec.DesiredState == old.Spec.DesiredState || obj.Spec.DesiredState == wbv1.SessionDesiredClosed)
	return nil, proposedUpdate(ctx, v.Client, "TerminalSession", "terminalsessions", old, obj, closing, sessionCeilings(obj))
}

// ValidateDelete implements admission.Validator.
func (TerminalSessionValidator) ValidateDelete(context.Context, *wbv1.TerminalSession) (admission.Warnings, error) {
	return nil, nil
}

// nodeRestricted applies only the node restriction (a node never writes a spec).
func nodeRestricted(ctx context.Context, kind, name string) (admission.Warnings, error) {
	_, err := nodeRestrictedRequest(ctx, kind, name)
	return nil, err
}

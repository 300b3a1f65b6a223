package webhooks

import (
	"context"
	"fmt"
	"maps"
	"slices"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// proposedUpdate is the update rule of a proposed object (TerminalCommand, TerminalSession,
// ActionRun), in one place:
//   - a node identity writes only the status of an object bound to its node (the stored
//     object's labels), never its spec;
//   - a status write passes (RBAC governs who may write status);
//   - specErr, when not nil, refuses a spec write (a session's ceilings);
//   - a subject that may not write the kind's status — a proposer such as the
//     workbench-agent role — may make only the change stateOK allows (cancel or close).
//     Labels, finalizers and owner references bind the object to a node and to the
//     manager's cleanup: only a subject allowed to write status (the manager, a node agent,
//     an administrator) may change them. The schema's CEL keeps the rest of a command's spec
//     immutable for everyone.
func proposedUpdate(ctx context.Context, c client.Client, kind, resource string, old, obj client.Object, stateOK bool, specErr error) error {
	req, err := nodeRestrictedRequest(ctx, kind, obj.GetName())
	if err != nil {
		return err
	}
	if isStatus(req) {
		return nil
	}
	if specErr != nil {
		return specErr
	}
	if stateOK && maps.Equal(old.GetLabels(), obj.GetLabels()) && slices.Equal(old.GetFinalizers(), obj.GetFinalizers()) &&
		slices.EqualFunc(old.GetOwnerReferences(), obj.GetOwnerReferences(), func(a, b metav1.OwnerReference) bool { return a.UID == b.UID }) {
		return nil
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: req.UserInfo.Username, Groups: req.UserInfo.Groups, UID: req.UserInfo.UID,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: obj.GetNamespace(), Verb: "update",
			Group: wbv1.GroupVersion.Group, Resource: resource, Subresource: "status"},
	}}
	if len(req.UserInfo.Extra) > 0 {
		sar.Spec.Extra = map[string]authorizationv1.ExtraValue{}
		for k, v := range req.UserInfo.Extra {
			sar.Spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	if err := c.Create(ctx, sar); err != nil {
		return fmt.Errorf("checking %q's right to update %s/status: %w", req.UserInfo.Username, resource, err)
	}
	if sar.Status.Allowed {
		return nil
	}
	return forbidden(kind, obj.GetName(), actuation.CodeImmutable,
		"user %q may only cancel or close it (spec.desiredState); labels, finalizers and owner references are the manager's", req.UserInfo.Username)
}

// Package webhooks holds the admission webhooks, one file per kind. Each is thin: decode,
// call the actuation core, answer with a stable refusal code in the message.
package webhooks

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// Node identities. A node agent authenticates either as the node-agent ServiceAccount with a
// bound token (the API server adds the node name to the user's extra), or — on the embedded
// default, where no kubelet exists — as user workbench:node:<name> in group workbench:nodes.
const (
	NodeAgentServiceAccount = "node-agent"
	NodeUserPrefix          = "workbench:node:"
	NodeGroup               = "workbench:nodes"
	nodeNameExtraKey        = "authentication.kubernetes.io/node-name"
)

// NodeIdentity tells whether a request comes from a node agent and for which node. isNode is
// true for every node-agent identity; node is empty when the node cannot be determined, in
// which case every node-restricted write is refused.
func NodeIdentity(u authenticationv1.UserInfo) (node string, isNode bool) {
	if parts := strings.Split(u.Username, ":"); len(parts) == 4 && parts[0] == "system" && parts[1] == "serviceaccount" &&
		(parts[3] == NodeAgentServiceAccount || parts[3] == "workbench-"+NodeAgentServiceAccount) {
		if v := u.Extra[nodeNameExtraKey]; len(v) == 1 {
			return v[0], true
		}
		return "", true
	}
	if slices.Contains(u.Groups, NodeGroup) {
		return strings.TrimPrefix(u.Username, NodeUserPrefix), true
	}
	if strings.HasPrefix(u.Username, NodeUserPrefix) {
		return "", true
	}
	return "", false
}

// request returns the admission request carried in ctx.
func request(ctx context.Context) (admission.Request, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return admission.Request{}, fmt.Errorf("reading admission request: %w", err)
	}
	return req, nil
}

// lookup reads the object name in namespace into obj, live or from the validator's reader.
// found is false, with no error, when it does not exist: what a missing object means is each
// caller's rule (a refusal, or nothing to check yet). Any other error names the kind and
// object read and, in purpose (" for TerminalView v", " of a new command" or ""), what for.
func lookup[N ~string](ctx context.Context, r client.Reader, kind, namespace string, name N, obj client.Object, purpose string) (found bool, err error) {
	switch err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: string(name)}, obj); {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("reading %s %s/%s%s: %w", kind, namespace, name, purpose, err)
	}
}

// nodeRestrictedRequest is the admission request in ctx, refused (nodeRestriction) when a
// node identity writes the spec of kind, or creates one.
func nodeRestrictedRequest(ctx context.Context, kind, name string) (admission.Request, error) {
	req, err := request(ctx)
	if err != nil {
		return admission.Request{}, err
	}
	return req, nodeRestriction(req, kind, name)
}

// specRefusals is the rule of a kind judged by its spec alone: no node identity writes it,
// and the spec's refusals (computed only then) make one Invalid error.
func specRefusals(ctx context.Context, kind, name string, refusals func() field.ErrorList) error {
	if _, err := nodeRestrictedRequest(ctx, kind, name); err != nil {
		return err
	}
	return invalid(kind, name, refusals())
}

// invalid turns refusals into one Invalid error whose causes carry the refusal codes.
func invalid(kind string, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: wbv1.GroupVersion.Group, Kind: kind}, name, errs)
}

// refusalErrors maps core refusals below a base field path.
func refusalErrors(base *field.Path, refusals []*actuation.Refusal) field.ErrorList {
	var errs field.ErrorList
	for _, r := range refusals {
		if r == nil {
			continue
		}
		p := base
		switch {
		case r.Field == "":
		case strings.HasPrefix(r.Field, base.String()+"."):
			p = field.NewPath(r.Field) // the core already names the full path
		default:
			p = base.Child(r.Field)
		}
		errs = append(errs, field.Invalid(p, "", string(r.Code)+": "+r.Message))
	}
	return errs
}

// pathErrors refuses, at p, a path that is not a clean relative path beneath its root
// (actuation.ValidateRelativePath; file: it must name a file, not the root itself).
func pathErrors(p *field.Path, rel string, file bool) field.ErrorList {
	return refusalErrors(p, one(actuation.ValidateRelativePath(rel, file)))
}

func one(r *actuation.Refusal) []*actuation.Refusal {
	if r == nil {
		return nil
	}
	return []*actuation.Refusal{r}
}

// forbidden is a refusal that is about who asks, not what is asked.
func forbidden(kind, name string, code actuation.Code, format string, args ...any) error {
	return apierrors.NewForbidden(schema.GroupResource{Group: wbv1.GroupVersion.Group, Resource: strings.ToLower(kind)}, name,
		fmt.Errorf("%s: %s", code, fmt.Sprintf(format, args...)))
}

// nodeRestriction enforces that a node identity never writes the spec of a workbench object
// (nor creates one). Non-node identities pass (RBAC governs them).
//
// Its other half, that a node writes only the status of objects bound to it (by the node
// label), is enforced by the API server itself: the ValidatingAdmissionPolicy in
// config/webhook/node_status_policy.yaml, so a node's status write costs no webhook round
// trip. The webhooks are not registered for those status subresources.
func nodeRestriction(req admission.Request, kind, name string) error {
	node, isNode := NodeIdentity(req.UserInfo)
	if !isNode || isStatus(req) {
		return nil
	}
	if node == "" {
		return forbidden(kind, name, actuation.CodeNodeRestricted, "node agent identity %q carries no node name", req.UserInfo.Username)
	}
	return forbidden(kind, name, actuation.CodeNodeRestricted, "node %q may not write the spec of %s objects", node, kind)
}

// isStatusOrDelete reports requests that carry no new spec to validate.
func isStatus(req admission.Request) bool { return req.SubResource == "status" }

// Authorizer checks a subject's access with SubjectAccessReview. Consent and patch approval
// use it to require the virtual verb "approve".
type Authorizer struct{ Client client.Client }

// Allowed asks the API server whether the user may do verb on group/resource in namespace.
func (a Authorizer) Allowed(ctx context.Context, user string, groups []string, extra map[string]authenticationv1.ExtraValue, uid, verb, resource, namespace string) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups, UID: uid,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Group: wbv1.GroupVersion.Group, Resource: resource,
		},
	}}
	if len(extra) > 0 {
		sar.Spec.Extra = map[string]authorizationv1.ExtraValue{}
		for k, v := range extra {
			sar.Spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	if err := a.Client.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("creating SubjectAccessReview for %q: %w", user, err)
	}
	return sar.Status.Allowed, nil
}

package webhooks

import (
	"context"
	"slices"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"sensorium.dev/workbench/internal/actuation"
)

// granter is what sets one kind of grant apart at admission: who may grant (a virtual verb on
// a resource, checked with SubjectAccessReview), the object a grant answers, the spec field
// naming the granter and the refusal code. ConsentGrant and ViewGrant share it, so the
// granting identity is stamped and checked in one place.
type granter struct {
	kind      string         // the grant's kind
	refKind   string         // the kind of the object a grant answers
	field     string         // the spec field naming the granter
	verb      string         // the (virtual) verb a granter must be allowed ...
	resource  string         // ... on this resource of the group
	act       string         // what a granter does, for messages
	code      actuation.Code // the refusal of a subject who may not grant
	nodeNever string         // what a node agent is told
}

var (
	consentGranter = granter{kind: "ConsentGrant", refKind: "ConsentRequest", field: "operator", verb: "approve", resource: "consentrequests",
		act: "approve consent requests", code: actuation.CodeConsentNotOperator, nodeNever: "node agents never decide consent"}
	viewGranter = granter{kind: "ViewGrant", refKind: "TerminalView", field: "grantedBy", verb: VerbGrant, resource: "terminalviews",
		act: "grant terminalviews", code: actuation.CodeViewGrantNotAuthorized, nodeNever: "node agents never grant views"}
)

// stamp returns the granting identity of the admission request in ctx (a client never
// chooses it) and reads into ref the object the grant named name answers (refName in
// namespace); found is false when that object does not exist, which the validator refuses.
func (g granter) stamp(ctx context.Context, r client.Reader, name, namespace, refName string, ref client.Object) (user string, groups []string, found bool, err error) {
	req, err := request(ctx)
	if err != nil {
		return "", nil, false, err
	}
	if found, err = lookup(ctx, r, g.refKind, namespace, refName, ref, " for "+g.kind+" "+name); err != nil {
		return "", nil, false, err
	}
	return req.UserInfo.Username, slices.Clone(req.UserInfo.Groups), found, nil
}

// require admits only a subject allowed g's verb in namespace, never a node agent.
func (g granter) require(ctx context.Context, authz Authorizer, req admission.Request, name, namespace string) error {
	if _, isNode := NodeIdentity(req.UserInfo); isNode {
		return forbidden(g.kind, name, actuation.CodeNodeRestricted, "%s", g.nodeNever)
	}
	ok, err := authz.Allowed(ctx, req.UserInfo.Username, req.UserInfo.Groups, req.UserInfo.Extra, req.UserInfo.UID, g.verb, g.resource, namespace)
	if err != nil {
		return err
	}
	if !ok {
		return forbidden(g.kind, name, g.code, "user %q may not %s in %q", req.UserInfo.Username, g.act, namespace)
	}
	return nil
}

// grantDeps is what a grant's validator works with: a reader of the API server itself (a
// grant is judged against the object it answers as it is now, never a cache's copy), the
// SubjectAccessReview check of the granter, and the clock for expiries.
type grantDeps struct {
	Reader client.Reader
	Authz  Authorizer
	Now    func() time.Time
}

// setupGrant registers a grant kind's stamper and validator, both reading the API server.
func setupGrant[T client.Object](mgr ctrl.Manager, obj T, stamper func(client.Reader) admission.Defaulter[T], validator func(grantDeps) admission.Validator[T]) error {
	deps := grantDeps{Reader: mgr.GetAPIReader(), Authz: Authorizer{Client: mgr.GetClient()}, Now: time.Now}
	return serve(mgr, obj, stamper(deps.Reader), validator(deps))
}

// create is a grant's create rule: a subject allowed to grant, who is also the granter
// stamped in the grant.
func (g granter) create(ctx context.Context, authz Authorizer, name, namespace, stamped string) error {
	req, err := request(ctx)
	if err != nil {
		return err
	}
	if err := g.require(ctx, authz, req, name, namespace); err != nil {
		return err
	}
	if stamped != req.UserInfo.Username {
		return forbidden(g.kind, name, g.code, "%s must be the requesting user %q", g.field, req.UserInfo.Username)
	}
	return nil
}

// update is a grant's update rule: only revoked may change (CEL), and revoking is a
// granter's act too; a status write answers to status (nil: RBAC alone governs it).
func (g granter) update(ctx context.Context, authz Authorizer, name, namespace string, status func(admission.Request) error) error {
	req, err := request(ctx)
	if err != nil {
		return err
	}
	if isStatus(req) {
		if status == nil {
			return nil
		}
		return status(req)
	}
	return g.require(ctx, authz, req, name, namespace)
}

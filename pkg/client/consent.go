package client

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// OperatorRole is the ClusterRole whose subjects may approve consent requests and patches.
const OperatorRole = "workbench-operator"

// ConsentInfo is what a waiting caller is shown about a consent request.
type ConsentInfo struct {
	Request   string   `json:"request"`
	Command   string   `json:"command,omitempty"`
	Argv      []string `json:"argv,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	Options   []string `json:"options,omitempty"`
	Decision  string   `json:"decision,omitempty"`
	ExpiresAt string   `json:"expiresAt,omitempty"`
	// Approvers are the subjects bound to workbench-operator (when the caller may list
	// bindings); ApproveCommand is what one of them runs.
	Approvers      []string `json:"approvers,omitempty"`
	ApproveCommand string   `json:"approveCommand"`
}

// ConsentInfo describes the consent request a command waits on (nil if it names none).
func (c *Client) ConsentInfo(ctx context.Context, cmd *wbv1.TerminalCommand) *ConsentInfo {
	name := cmd.Status.ConsentRequestRef
	if name == "" {
		return nil
	}
	info := &ConsentInfo{Request: name, Command: cmd.Name, Argv: cmd.Spec.Argv,
		ApproveCommand: fmt.Sprintf("kubectl workbench -n %s consent approve %s", c.Namespace, name)}
	var cr wbv1.ConsentRequest
	if err := c.Kube.Get(ctx, ctrlclient.ObjectKey{Namespace: c.Namespace, Name: name}, &cr); err == nil {
		fillConsentInfo(info, &cr)
	}
	info.Approvers = c.Approvers(ctx)
	return info
}

func fillConsentInfo(info *ConsentInfo, cr *wbv1.ConsentRequest) {
	info.Command = string(cr.Spec.Descriptor.CommandRef)
	info.Argv = cr.Spec.Descriptor.Argv
	info.Reason = cr.Spec.Descriptor.ReasonCode
	info.Decision = string(wbv1.ConsentDecisionFor(cr.Status.Conditions))
	for _, o := range cr.Spec.Options {
		info.Options = append(info.Options, string(o))
	}
	if cr.Status.ExpiresAt != nil {
		info.ExpiresAt = cr.Status.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z")
	}
}

// Approvers lists the subjects bound to workbench-operator cluster-wide or in the
// namespace, as "User alice", "Group ops", "ServiceAccount ns/name". Callers that may not
// list bindings get nil (no SubjectAccessReview is attempted).
func (c *Client) Approvers(ctx context.Context) []string {
	var out []string
	add := func(ref rbacv1.RoleRef, subjects []rbacv1.Subject, scope string) {
		if ref.Kind != "ClusterRole" || ref.Name != OperatorRole {
			return
		}
		for _, s := range subjects {
			name := s.Name
			if s.Kind == rbacv1.ServiceAccountKind {
				name = s.Namespace + "/" + s.Name
			}
			out = append(out, s.Kind+" "+name+scope)
		}
	}
	var crbs rbacv1.ClusterRoleBindingList
	if err := c.Kube.List(ctx, &crbs); err == nil {
		for _, b := range crbs.Items {
			add(b.RoleRef, b.Subjects, "")
		}
	}
	var rbs rbacv1.RoleBindingList
	if err := c.Kube.List(ctx, &rbs, ctrlclient.InNamespace(c.Namespace)); err == nil {
		for _, b := range rbs.Items {
			add(b.RoleRef, b.Subjects, " (namespace "+c.Namespace+")")
		}
	}
	return out
}

// ListConsentRequests lists the namespace's consent requests; pendingOnly keeps those
// still waiting for a decision.
func (c *Client) ListConsentRequests(ctx context.Context, pendingOnly bool) ([]wbv1.ConsentRequest, error) {
	var l wbv1.ConsentRequestList
	if err := c.Kube.List(ctx, &l, ctrlclient.InNamespace(c.Namespace)); err != nil {
		return nil, Wrap("consentrequests", err)
	}
	if !pendingOnly {
		return l.Items, nil
	}
	var out []wbv1.ConsentRequest
	for _, cr := range l.Items {
		if wbv1.ConsentDecisionFor(cr.Status.Conditions) == wbv1.DecisionPending {
			out = append(out, cr)
		}
	}
	return out, nil
}

// DecideRequest is an operator's decision on a consent request.
type DecideRequest struct {
	Request string `json:"request"`
	// Scope is deny, allow-once, remember-exact-argv or remember-argv-prefix.
	Scope        string   `json:"scope"`
	PrefixLength int32    `json:"prefixLength,omitempty"`
	Variable     []string `json:"variablePrefixes,omitempty"`
	Reason       string   `json:"reason,omitempty"`
}

// Decide creates the ConsentGrant recording an operator's decision (deny is a grant of
// scope deny) and returns it. The admission webhook stamps the operator from the caller.
func (c *Client) Decide(ctx context.Context, d DecideRequest) (*wbv1.ConsentGrant, error) {
	if d.Request == "" {
		return nil, Usage("name the consent request")
	}
	scope := wbv1.ConsentScope(d.Scope)
	if scope == "" {
		scope = wbv1.ConsentAllowOnce
	}
	g := &wbv1.ConsentGrant{ObjectMeta: metav1.ObjectMeta{GenerateName: d.Request + "-", Namespace: c.Namespace},
		Spec: wbv1.ConsentGrantSpec{RequestRef: wbv1.ObjectName(d.Request), Scope: scope, Reason: d.Reason}}
	if scope == wbv1.ConsentRememberArgvPrefix {
		if d.PrefixLength <= 0 {
			return nil, Usage("remember-argv-prefix needs --prefix-length")
		}
		g.Spec.PrefixLength = &d.PrefixLength
		g.Spec.VariablePrefixes = d.Variable
	}
	if err := c.Kube.Create(ctx, g); err != nil {
		return nil, Wrap("consentgrant for "+d.Request, err)
	}
	return g, nil
}

// Revoke revokes a grant, named directly or through the request it decided.
func (c *Client) Revoke(ctx context.Context, name string) (*wbv1.ConsentGrant, error) {
	grant := name
	var cr wbv1.ConsentRequest
	if err := c.Kube.Get(ctx, ctrlclient.ObjectKey{Namespace: c.Namespace, Name: name}, &cr); err == nil {
		if cr.Status.GrantRef == "" {
			return nil, &Error{Class: ClassNotFound, Object: "consentrequest " + name, Message: "no grant decided this request"}
		}
		grant = cr.Status.GrantRef
	}
	g := &wbv1.ConsentGrant{ObjectMeta: metav1.ObjectMeta{Name: grant, Namespace: c.Namespace}}
	patch := ctrlclient.RawPatch(types.MergePatchType, []byte(`{"spec":{"revoked":true}}`))
	if err := c.Kube.Patch(ctx, g, patch); err != nil {
		return nil, Wrap("consentgrant "+grant, err)
	}
	return g, nil
}

// ConsentSummaries describes requests for listing (one ConsentInfo each).
func (c *Client) ConsentSummaries(items []wbv1.ConsentRequest) []ConsentInfo {
	out := make([]ConsentInfo, 0, len(items))
	for i := range items {
		info := ConsentInfo{Request: items[i].Name,
			ApproveCommand: fmt.Sprintf("kubectl workbench -n %s consent approve %s", c.Namespace, items[i].Name)}
		fillConsentInfo(&info, &items[i])
		out = append(out, info)
	}
	return out
}

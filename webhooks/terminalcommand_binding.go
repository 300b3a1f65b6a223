package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// +kubebuilder:webhook:path=/mutate-workbench-sensorium-dev-v1alpha1-terminalcommand,mutating=true,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=terminalcommands,verbs=create,versions=v1alpha1,name=mterminalcommand.workbench.sensorium.dev,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded

// TerminalCommandBinder binds a command to its node at creation (issue 13, "one hop"): it
// resolves session → environment → node from the manager's informer cache and sets the
// node and environment labels, so the node agent sees the command from its first watch event
// and decides admission itself (internal/nodeagent/agent, fast path) instead of waiting for
// the manager's gate to bind it. It also adds the cleanup finalizer the manager would
// otherwise add right after creation (a second metadata write racing the node).
//
// Labels a client sent are never trusted: the node and environment labels are overwritten
// with what the cache resolves, or removed when nothing resolves yet (then the gate binds
// the command later, as before). Nothing here admits anything: the labels only route the
// command; the node re-runs admission against the effective profile and the environment's
// recorded node before it starts anything.
//
// It is also where a create is validated: Handle first runs
// TerminalCommandValidator.ValidateCreate (the same rules, not a copy) and refuses with its
// error, so a create costs the API server one webhook call, not a mutating and then a
// validating one. A validating webhook would see the object after every mutating webhook;
// this one is registered with reinvocationPolicy IfNeeded, so when a later mutating webhook
// changes the object the API server calls it again and the rules see that change too. Nothing
// depends on this alone: the manager's gate and the node re-check the command against the
// live profile before anything runs.
//
// It answers with a JSON patch built from the few fields it sets (bindingPatch), not by
// marshalling the whole object and diffing it against the request (controller-runtime's
// Defaulter path): that diff was a third of the handler's CPU time.
type TerminalCommandBinder struct {
	Reader client.Reader
	// Validator holds the create rules (ValidateCreate).
	Validator TerminalCommandValidator
	Decoder   admission.Decoder
}

// terminalCommandMutatePath is where the API server calls TerminalCommandBinder.
const terminalCommandMutatePath = "/mutate-workbench-sensorium-dev-v1alpha1-terminalcommand"

// Handle implements admission.Handler.
func (b TerminalCommandBinder) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var obj wbv1.TerminalCommand
	if err := b.Decoder.DecodeRaw(req.Object, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	ctx = admission.NewContextWithRequest(ctx, req)
	if _, err := b.Validator.ValidateCreate(ctx, &obj); err != nil {
		return auditCorrelation(refusal(err), obj.Labels[wbv1.CorrelationLabel])
	}
	// The creator is the request's user, whatever the client sent (CEL keeps it after).
	obj.Spec.CreatedBy = req.UserInfo.Username
	if err := b.owned(ctx, &obj); err != nil {
		return auditCorrelation(refusal(err), obj.Labels[wbv1.CorrelationLabel])
	}
	node, env, err := b.resolve(ctx, &obj)
	if err != nil {
		return auditCorrelation(refusal(err), obj.Labels[wbv1.CorrelationLabel])
	}
	ops := bindingPatch(&obj, node, env)
	cops, cid := correlationPatch(&obj, len(obj.Labels) > 0 || node != "") // correlation.go
	ops = append(ops, cops...)
	ops = append(ops, jsonpatch.Operation{Operation: "add", Path: "/spec/createdBy", Value: obj.Spec.CreatedBy})
	return auditCorrelation(admission.Patched("", ops...), cid) // correlation_audit.go
}

// owned refuses a command into a session that is someone else's terminal
// (actuation.CheckSessionEmitter: a PTY program, raw input or a published view, owned by
// another user). A session the cache does not hold yet passes here: the node applies the
// same rule before it starts anything.
func (b TerminalCommandBinder) owned(ctx context.Context, obj *wbv1.TerminalCommand) error {
	var sess wbv1.TerminalSession
	if found, err := lookup(ctx, b.Reader, "TerminalSession", obj.Namespace, obj.Spec.SessionRef, &sess, " of a new command"); err != nil || !found {
		return err
	}
	if sess.Spec.CreatedBy != "" && sess.Spec.CreatedBy == obj.Spec.CreatedBy {
		return nil // the owner's own command: no view lookup
	}
	var views wbv1.TerminalViewList
	if err := b.Reader.List(ctx, &views, client.InNamespace(obj.Namespace)); err != nil {
		return fmt.Errorf("listing the TerminalViews of %s for a new command: %w", obj.Namespace, err)
	}
	if r := actuation.CheckSessionEmitter(convert.SessionUse(&sess, views.Items), obj.Spec.CreatedBy); r != nil {
		return forbidden("TerminalCommand", obj.Name, r.Code, "spec.sessionRef: %s", r.Message)
	}
	return nil
}

// refusal answers a refused admission: an API status error keeps its status (code, reason,
// causes carrying the refusal codes), anything else is a plain denial.
func refusal(err error) admission.Response {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		status := st.Status()
		return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
	}
	return admission.Denied(err.Error())
}

// bindingLabels are the labels the binder owns, in patch order.
var bindingLabels = [...]string{wbv1.NodeLabel, wbv1.EnvironmentLabel}

// bindingPatch is the JSON patch (RFC 6902) that binds obj: the node and environment labels
// set to node and env, or removed when node is "" (labels a client sent are never kept), and
// the cleanup finalizer added.
func bindingPatch(obj *wbv1.TerminalCommand, node, env string) []jsonpatch.Operation {
	want := map[string]string{}
	if node != "" {
		want[wbv1.NodeLabel], want[wbv1.EnvironmentLabel] = node, env
	}
	var ops []jsonpatch.Operation
	if len(obj.Labels) == 0 {
		if len(want) > 0 {
			ops = append(ops, jsonpatch.Operation{Operation: "add", Path: "/metadata/labels", Value: want})
		}
	} else {
		for _, k := range bindingLabels {
			have, had := obj.Labels[k]
			w, ok := want[k]
			switch {
			case ok && (!had || have != w):
				ops = append(ops, jsonpatch.Operation{Operation: "add", Path: "/metadata/labels/" + pointerEscape(k), Value: w})
			case !ok && had:
				ops = append(ops, jsonpatch.Operation{Operation: "remove", Path: "/metadata/labels/" + pointerEscape(k)})
			}
		}
	}
	switch {
	case slices.Contains(obj.Finalizers, wbv1.CleanupFinalizer):
	case len(obj.Finalizers) == 0:
		ops = append(ops, jsonpatch.Operation{Operation: "add", Path: "/metadata/finalizers", Value: []string{wbv1.CleanupFinalizer}})
	default:
		ops = append(ops, jsonpatch.Operation{Operation: "add", Path: "/metadata/finalizers/-", Value: wbv1.CleanupFinalizer})
	}
	return ops
}

// pointerEscape escapes one JSON pointer (RFC 6901) reference token.
func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// resolve names the node and environment a new command belongs to ("" when the session or
// environment does not exist yet, is over, or is not placed).
func (b TerminalCommandBinder) resolve(ctx context.Context, obj *wbv1.TerminalCommand) (string, string, error) {
	var sess wbv1.TerminalSession
	if found, err := lookup(ctx, b.Reader, "TerminalSession", obj.Namespace, obj.Spec.SessionRef, &sess, " of a new command"); err != nil || !found {
		return "", "", err
	}
	if wbv1.SessionPhaseIsFinal(sess.Status.Phase) {
		return "", "", nil
	}
	var env wbv1.Environment
	if found, err := lookup(ctx, b.Reader, "Environment", obj.Namespace, sess.Spec.EnvironmentRef, &env, " of a new command"); err != nil || !found {
		return "", "", err
	}
	if env.Status.NodeName == "" || env.Status.Phase != wbv1.EnvironmentReady {
		return "", "", nil
	}
	return env.Status.NodeName, env.Name, nil
}

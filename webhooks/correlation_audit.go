package webhooks

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// CorrelationAuditKey is the admission audit annotation every webhook answer about an object
// carrying a correlation id (wbv1.CorrelationLabel) sets to that id (issue 30 item 5).
// kube-apiserver records it in the request's audit event as "<webhook name>/correlation-id"
// (for example mterminalcommand.workbench.sensorium.dev/correlation-id), so the audit log
// of a command, its waits, probes, artifacts, consent request and recording can be selected
// by the same id as the objects themselves.
const CorrelationAuditKey = "correlation-id"

// auditCorrelation is the one place a webhook answer gets the correlation audit annotation:
// id is the correlation id of the admitted object as it will be stored ("" sets nothing).
// Refusals carry it too: a refused create is part of what the id threads.
func auditCorrelation(resp admission.Response, id string) admission.Response {
	if id == "" {
		return resp
	}
	if resp.AuditAnnotations == nil {
		resp.AuditAnnotations = map[string]string{}
	}
	resp.AuditAnnotations[CorrelationAuditKey] = id
	return resp
}

// serve registers obj's defaulting (d, may be nil) and validating (v, may be nil) webhooks at
// the paths controller-runtime's builder generates (the kubebuilder markers' paths), with
// every answer given the correlation audit annotation of the object the rules saw. It
// replaces ctrl.NewWebhookManagedBy(mgr, obj).WithDefaulter(d).WithValidator(v).Complete():
// that builder's handlers decode the object themselves and offer no way to annotate their
// answer, so the rules are wrapped (correlated*) to note the id of the object they were
// handed, without decoding it a second time.
func serve[T client.Object](mgr ctrl.Manager, obj T, d admission.Defaulter[T], v admission.Validator[T]) error {
	gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
	if err != nil {
		return err
	}
	if d != nil {
		w := admission.WithDefaulter[T](mgr.GetScheme(), correlatedDefaulter[T]{d})
		w.Handler = correlationAudited{w.Handler}
		mgr.GetWebhookServer().Register(webhookPath("mutate", gvk), w)
	}
	if v != nil {
		w := admission.WithValidator[T](mgr.GetScheme(), correlatedValidator[T]{v})
		w.Handler = correlationAudited{w.Handler}
		mgr.GetWebhookServer().Register(webhookPath("validate", gvk), w)
	}
	return nil
}

// webhookPath is the path controller-runtime's builder registers a kind's webhook at
// ("/validate-workbench-sensorium-dev-v1alpha1-wait"), the path the markers name.
func webhookPath(verb string, gvk schema.GroupVersionKind) string {
	return "/" + verb + "-" + strings.ReplaceAll(gvk.Group, ".", "-") + "-" + gvk.Version + "-" + strings.ToLower(gvk.Kind)
}

// correlationNote carries, through one admission request's context, the correlation id of
// the object the wrapped rules were handed.
type correlationNote struct{ id string }

type correlationNoteKey struct{}

func noteCorrelation(ctx context.Context, obj client.Object) {
	if n, ok := ctx.Value(correlationNoteKey{}).(*correlationNote); ok {
		n.id = obj.GetLabels()[wbv1.CorrelationLabel]
	}
}

// correlationAudited annotates the wrapped handler's answer with the id its rules noted.
type correlationAudited struct{ admission.Handler }

// Handle implements admission.Handler.
func (h correlationAudited) Handle(ctx context.Context, req admission.Request) admission.Response {
	n := &correlationNote{}
	resp := h.Handler.Handle(context.WithValue(ctx, correlationNoteKey{}, n), req)
	return auditCorrelation(resp, n.id)
}

// correlatedValidator notes the id of the object validated (the new object on update, the
// deleted one on delete).
type correlatedValidator[T client.Object] struct{ v admission.Validator[T] }

func (c correlatedValidator[T]) ValidateCreate(ctx context.Context, obj T) (admission.Warnings, error) {
	noteCorrelation(ctx, obj)
	return c.v.ValidateCreate(ctx, obj)
}

func (c correlatedValidator[T]) ValidateUpdate(ctx context.Context, old, obj T) (admission.Warnings, error) {
	noteCorrelation(ctx, obj)
	return c.v.ValidateUpdate(ctx, old, obj)
}

func (c correlatedValidator[T]) ValidateDelete(ctx context.Context, obj T) (admission.Warnings, error) {
	noteCorrelation(ctx, obj)
	return c.v.ValidateDelete(ctx, obj)
}

// correlatedDefaulter notes the id of the object once defaulted (what will be stored).
type correlatedDefaulter[T client.Object] struct{ d admission.Defaulter[T] }

func (c correlatedDefaulter[T]) Default(ctx context.Context, obj T) error {
	err := c.d.Default(ctx, obj)
	noteCorrelation(ctx, obj)
	return err
}

package webhooks

import (
	"context"
	"net/http"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// +kubebuilder:webhook:path=/mutate-workbench-sensorium-dev-v1alpha1-actionrun,mutating=true,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=actionruns,verbs=create,versions=v1alpha1,name=mactionrun.workbench.sensorium.dev,admissionReviewVersions=v1

// actionRunMutatePath is where the API server calls ActionRunStamper.
const actionRunMutatePath = "/mutate-workbench-sensorium-dev-v1alpha1-actionrun"

// ActionRunStamper stamps a new ActionRun (issue 30 items 4 and 5): spec.createdBy is the
// request's user whatever the client sent (the identity a denied C7 consent cools down for;
// CEL keeps it immutable after), and a run created without a correlation id gets one
// (correlationLabelPatch); a supplied id is kept. It sets nothing that admits anything.
type ActionRunStamper struct {
	Decoder admission.Decoder
}

func setupActionRunStamper(mgr ctrl.Manager) {
	mgr.GetWebhookServer().Register(actionRunMutatePath, &admission.Webhook{
		Handler: ActionRunStamper{Decoder: admission.NewDecoder(mgr.GetScheme())},
	})
}

// Handle implements admission.Handler.
func (s ActionRunStamper) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var obj wbv1.ActionRun
	if err := s.Decoder.DecodeRaw(req.Object, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	ops, cid := correlationLabelPatch(obj.Labels)
	ops = append(ops, jsonpatch.Operation{Operation: "add", Path: "/spec/createdBy", Value: req.UserInfo.Username})
	return auditCorrelation(admission.Patched("", ops...), cid)
}

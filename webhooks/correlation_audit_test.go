package webhooks

import (
	"context"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// probeRules admits everything but an object named "refused" (a validator and defaulter
// under test only: what is tested is the wrapping serve puts around real rules).
type probeRules struct{}

func (probeRules) ValidateCreate(_ context.Context, p *wbv1.Probe) (admission.Warnings, error) {
	return nil, refuseNamed(p)
}
func (probeRules) ValidateUpdate(_ context.Context, _, p *wbv1.Probe) (admission.Warnings, error) {
	return nil, refuseNamed(p)
}
func (probeRules) ValidateDelete(_ context.Context, p *wbv1.Probe) (admission.Warnings, error) {
	return nil, refuseNamed(p)
}

// Default gives an unlabelled probe the id "defaulted".
func (probeRules) Default(_ context.Context, p *wbv1.Probe) error {
	if p.Labels[wbv1.CorrelationLabel] == "" {
		p.Labels = map[string]string{wbv1.CorrelationLabel: "defaulted"}
	}
	return nil
}

func refuseNamed(p *wbv1.Probe) error {
	if p.Name == "refused" {
		return forbidden("Probe", p.Name, "test-refused", "refused")
	}
	return nil
}

// TestCorrelationAuditWrapping: the handlers serve registers answer every operation with
// the correlation audit annotation of the object the rules saw — the new object on create and
// update, the deleted one on delete, the defaulted one from a defaulter, refusals included —
// and with none for an object without the label.
func TestCorrelationAuditWrapping(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := wbv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	validating := admission.WithValidator[*wbv1.Probe](scheme, correlatedValidator[*wbv1.Probe]{probeRules{}})
	validating.Handler = correlationAudited{validating.Handler}
	defaulting := admission.WithDefaulter[*wbv1.Probe](scheme, correlatedDefaulter[*wbv1.Probe]{probeRules{}})
	defaulting.Handler = correlationAudited{defaulting.Handler}
	raw := func(name, id string) runtime.RawExtension {
		p := &wbv1.Probe{TypeMeta: metav1.TypeMeta{APIVersion: wbv1.GroupVersion.String(), Kind: "Probe"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		if id != "" {
			p.Labels = map[string]string{wbv1.CorrelationLabel: id, "app": "x"}
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	for _, tc := range []struct {
		name        string
		hook        *admission.Webhook
		op          admissionv1.Operation
		obj, old    runtime.RawExtension
		want        string
		wantAllowed bool
	}{
		{"create", validating, admissionv1.Create, raw("p", "id-1"), runtime.RawExtension{}, "id-1", true},
		{"create without id", validating, admissionv1.Create, raw("p", ""), runtime.RawExtension{}, "", true},
		{"refused create", validating, admissionv1.Create, raw("refused", "id-2"), runtime.RawExtension{}, "id-2", false},
		{"update: the new object's id", validating, admissionv1.Update, raw("p", "id-new"), raw("p", "id-old"), "id-new", true},
		{"delete: the deleted object's id", validating, admissionv1.Delete, runtime.RawExtension{}, raw("p", "id-3"), "id-3", true},
		{"defaulter: the id set", defaulting, admissionv1.Create, raw("p", ""), runtime.RawExtension{}, "defaulted", true},
		{"defaulter: a supplied id", defaulting, admissionv1.Create, raw("p", "id-4"), runtime.RawExtension{}, "id-4", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.hook.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "u", Operation: tc.op, Name: "p", Namespace: "ns", Object: tc.obj, OldObject: tc.old}})
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed=%v, want %v (%+v)", resp.Allowed, tc.wantAllowed, resp.Result)
			}
			got, ok := resp.AuditAnnotations[CorrelationAuditKey]
			if got != tc.want || ok != (tc.want != "") || len(resp.AuditAnnotations) > 1 {
				t.Fatalf("audit annotations %v, want %s=%q", resp.AuditAnnotations, CorrelationAuditKey, tc.want)
			}
		})
	}
}

package agent

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/skills"
)

// withCorrelation adds the correlation id of from (its wbv1.CorrelationLabel) to labels:
// what the node creates on an object's behalf (a Recording's trace Artifact, an ActionRun's
// artifacts) carries the id of what caused it (issue 30 item 5).
func withCorrelation(labels map[string]string, from client.Object) map[string]string {
	if id := from.GetLabels()[wbv1.CorrelationLabel]; id != "" {
		labels[wbv1.CorrelationLabel] = id
	}
	return labels
}

// observedCorrelation is the correlation id of the recorded Wait or Probe (issue 30 item
// 5), "" when it carries none or is gone.
func (a *Agent) observedCorrelation(ctx context.Context, ns string, kind skills.EdgeKind, name string) string {
	var obj client.Object = &wbv1.Wait{}
	if kind == skills.EdgeProbe {
		obj = &wbv1.Probe{}
	}
	if err := a.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		return ""
	}
	return obj.GetLabels()[wbv1.CorrelationLabel]
}

package nodekit

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// WithCorrelation adds the correlation id of from (its wbv1.CorrelationLabel) to labels:
// what the node creates on an object's behalf (a Recording's trace Artifact, an ActionRun's
// artifacts) carries the id of what caused it (issue 30 item 5).
func WithCorrelation(labels map[string]string, from client.Object) map[string]string {
	if id := from.GetLabels()[wbv1.CorrelationLabel]; id != "" {
		labels[wbv1.CorrelationLabel] = id
	}
	return labels
}

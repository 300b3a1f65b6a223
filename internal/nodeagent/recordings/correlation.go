package recordings

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/skills"
)

// observedCorrelation is the correlation id of the recorded Wait or Probe (issue 30 item
// 5), "" when it carries none or is gone.
func (a *Room) observedCorrelation(ctx context.Context, ns string, kind skills.EdgeKind, name string) string {
	var obj client.Object = &wbv1.Wait{}
	if kind == skills.EdgeProbe {
		obj = &wbv1.Probe{}
	}
	if err := a.d.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		return ""
	}
	return obj.GetLabels()[wbv1.CorrelationLabel]
}

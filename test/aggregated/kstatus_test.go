package aggregated

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// kstatusOf is what kstatus (the health library behind Flux and apply-and-wait tools)
// reads from obj as the API server returned it: "Current", "InProgress", "Failed", ...
func kstatusOf(t *testing.T, obj runtime.Object) string {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	must(t, err)
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: m})
	must(t, err)
	return res.Status.String()
}

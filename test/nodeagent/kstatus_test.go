package nodeagent

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// wantKStatus reads obj, as the API server returned it, through kstatus (the health
// library behind Flux and apply-and-wait tools) and fails unless it computes want.
func wantKStatus(t *testing.T, obj runtime.Object, want kstatus.Status) {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: m})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != want {
		t.Fatalf("kstatus reads %s (%s), want %s; status %+v", res.Status, res.Message, want, m["status"])
	}
}

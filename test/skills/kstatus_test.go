package skills

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// wantKStatus fails unless kstatus (the health library behind Flux and apply-and-wait
// tools) reads obj, as the API server returned it, as want: a finished replay is Current
// only when it succeeded with a passing proof (issue 16 item 9).
func wantKStatus(t *testing.T, obj runtime.Object, want kstatus.Status) {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	must(t, err)
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: m})
	must(t, err)
	if res.Status != want {
		t.Fatalf("kstatus reads %s (%s), want %s; status %v", res.Status, res.Message, want, m["status"])
	}
}

func wantKStatusFailed(t *testing.T, obj runtime.Object) {
	t.Helper()
	wantKStatus(t, obj, kstatus.FailedStatus)
}

func wantKStatusCurrent(t *testing.T, obj runtime.Object) {
	t.Helper()
	wantKStatus(t, obj, kstatus.CurrentStatus)
}

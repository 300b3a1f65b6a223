package aggregated

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"sensorium.dev/workbench/internal/test/kstate"
)

// kstatusOf is what kstatus (the health library behind Flux and apply-and-wait tools)
// reads from obj as the API server returned it: "Current", "InProgress", "Failed", ...
func kstatusOf(t *testing.T, obj runtime.Object) string {
	t.Helper()
	return kstate.KStatus(t, obj).Status.String()
}

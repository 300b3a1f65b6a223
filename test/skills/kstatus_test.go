package skills

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"sensorium.dev/workbench/internal/test/kstate"
)

// wantKStatus fails unless kstatus (the health library behind Flux and apply-and-wait
// tools) reads obj, as the API server returned it, as want: a finished replay is Current
// only when it succeeded with a passing proof (issue 16 item 9).
var wantKStatus = kstate.WantKStatus

func wantKStatusFailed(t *testing.T, obj runtime.Object) {
	t.Helper()
	wantKStatus(t, obj, kstatus.FailedStatus)
}

func wantKStatusCurrent(t *testing.T, obj runtime.Object) {
	t.Helper()
	wantKStatus(t, obj, kstatus.CurrentStatus)
}

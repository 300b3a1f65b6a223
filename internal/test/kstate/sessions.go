package kstate

import (
	"context"
	"fmt"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/testkit"
)

// ReadyAndAllRunning reads Environment ns/envName and each named TerminalSession and
// reports whether the environment is Ready and every session Running, with the first
// status that is not as the message. A failed read fails the test.
func ReadyAndAllRunning(t testing.TB, c client.Reader, ns, envName string, sessions ...string) (bool, string) {
	t.Helper()
	ctx := context.Background()
	var e wbv1.Environment
	testkit.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: envName}, &e))
	if e.Status.Phase != wbv1.EnvironmentReady {
		return false, fmt.Sprintf("env=%+v", e.Status)
	}
	for _, n := range sessions {
		var s wbv1.TerminalSession
		testkit.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &s))
		if s.Status.Phase != wbv1.SessionRunning {
			return false, fmt.Sprintf("session %s=%+v", n, s.Status)
		}
	}
	return true, ""
}

// Package kstate holds the conditions the API-server suites poll on workbench objects
// (through testkit.Eventually or a suite's own eventually): one reading of "ready", not a
// copy per suite.
package kstate

import (
	"context"
	"fmt"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/testkit"
)

// ReadyAndRunning reads Environment ns/envName and TerminalSession ns/session and reports
// whether the environment is Ready and the session Running, with both statuses as the
// message. The environment read is left in e when e is not nil (callers that go on to use
// its status). A failed read fails the test.
func ReadyAndRunning(t testing.TB, c client.Reader, ns, envName, session string, e *wbv1.Environment) (bool, string) {
	t.Helper()
	if e == nil {
		e = &wbv1.Environment{}
	}
	var s wbv1.TerminalSession
	ctx := context.Background()
	testkit.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: envName}, e))
	testkit.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: session}, &s))
	return e.Status.Phase == wbv1.EnvironmentReady && s.Status.Phase == wbv1.SessionRunning,
		fmt.Sprintf("env=%+v session=%+v", e.Status, s.Status)
}

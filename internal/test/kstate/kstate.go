// Package kstate holds how the API-server suites read the state of workbench objects: the
// conditions they poll (through testkit.Eventually or a suite's own eventually) and what
// kstatus reads from an object. One reading, not a copy per suite.
package kstate

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
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

// ReadKStatus computes what kstatus (the health library behind Flux and apply-and-wait
// tools) reads from obj as held in memory (as the API server last returned it), and
// returns obj's unstructured content too, for a failure message or a field kstatus does
// not weigh.
func ReadKStatus(t testing.TB, obj runtime.Object) (*kstatus.Result, map[string]any) {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	testkit.Must(t, err)
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: m})
	testkit.Must(t, err)
	return res, m
}

// KStatus is ReadKStatus's result alone.
func KStatus(t testing.TB, obj runtime.Object) *kstatus.Result {
	t.Helper()
	res, _ := ReadKStatus(t, obj)
	return res
}

// WantKStatus fails the test unless kstatus reads obj as want.
func WantKStatus(t testing.TB, obj runtime.Object, want kstatus.Status) {
	t.Helper()
	res, m := ReadKStatus(t, obj)
	if res.Status != want {
		t.Fatalf("kstatus reads %s (%s), want %s; status %+v", res.Status, res.Message, want, m["status"])
	}
}

// EnvironmentNotReady reads Environment ns/name and reports whether its Ready condition is
// False with a message match accepts (a refusal's code, as a prefix or anywhere), with its
// status as the message otherwise. A failed read fails the test.
func EnvironmentNotReady(t testing.TB, c client.Reader, ns, name string, match func(message string) bool) (bool, string) {
	t.Helper()
	var e wbv1.Environment
	testkit.Must(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &e))
	for _, cond := range e.Status.Conditions {
		if cond.Type == wbv1.ConditionReady && cond.Status == metav1.ConditionFalse && match(cond.Message) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%+v", e.Status)
}

package client

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sensorium.dev/workbench/internal/actuation"
)

// Every code of the closed vocabulary has a class with a documented exit code.
func TestEveryCodeHasAnExitCode(t *testing.T) {
	for _, c := range actuation.Codes() {
		class := ClassOf(string(c))
		if _, ok := ExitCodes[class]; !ok {
			t.Errorf("code %s: class %q has no exit code", c, class)
		}
	}
	seen := map[int]Class{}
	for class, code := range ExitCodes {
		if other, dup := seen[code]; dup {
			t.Errorf("exit code %d used by %s and %s", code, class, other)
		}
		seen[code] = class
	}
}

func TestWrap(t *testing.T) {
	gr := schema.GroupResource{Group: "workbench.sensorium.dev", Resource: "terminalcommands"}
	webhook := apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "TerminalCommand"}, "x", nil)
	webhook.ErrStatus.Message = `admission webhook "vterminalcommand.workbench.sensorium.dev" denied the request: spec.timeoutSeconds: Invalid value: 999: timeout-above-max: timeoutSeconds must be at most 120`
	aggregated := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusTooManyRequests,
		Message: "queue-full: all 64 long-poll slots are in use",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: "queue-full", Message: "all 64 long-poll slots are in use"}}}}}
	for _, tc := range []struct {
		name  string
		err   error
		code  string
		class Class
		exit  int
	}{
		{"webhook refusal", webhook, "timeout-above-max", ClassRefused, 65},
		{"aggregated cause", aggregated, "queue-full", ClassCapReached, 75},
		{"rbac", apierrors.NewForbidden(gr, "x", errors.New("no")), "forbidden", ClassForbidden, 77}, // "forbidden" is in the closed vocabulary
		{"missing", apierrors.NewNotFound(gr, "x"), "", ClassNotFound, 66},
		{"unavailable", apierrors.NewServiceUnavailable("down"), "", ClassUnavailable, 69},
		{"consent", fmt.Errorf("x: %w", refused("terminalcommand x", "consent-denied", "denied")), "consent-denied", ClassConsent, 67},
		{"plain", errors.New("connection refused"), "", ClassInternal, 71},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e *Error
			if !errors.As(Wrap("terminalcommand x", tc.err), &e) {
				t.Fatalf("Wrap did not give an *Error")
			}
			if e.Code != tc.code || e.Class != tc.class || ExitCodeOf(tc.err) != tc.exit {
				t.Fatalf("code %q class %q exit %d; want %q %q %d", e.Code, e.Class, ExitCodeOf(tc.err), tc.code, tc.class, tc.exit)
			}
		})
	}
	if ExitCodeOf(&ExitError{Code: 3}) != 3 || ExitCodeOf(nil) != 0 {
		t.Fatal("a command's own exit code must pass through")
	}
}

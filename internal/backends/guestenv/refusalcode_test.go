package guestenv

import (
	"fmt"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/guestclient"
)

// TestRefusalCodeTellsGuestFromBroker: the broker's refusal keeps its code; the guest's
// (guestclient's ErrGuestRefused marker) is mapped onto the command vocabulary, its own
// code staying in the message only.
func TestRefusalCodeTellsGuestFromBroker(t *testing.T) {
	e := &env{}
	guest := func(c actuation.Code) error {
		return fmt.Errorf("spawn: %w", &actuation.Refusal{Code: c, Message: "x", Cause: guestclient.ErrGuestRefused})
	}
	for _, tc := range []struct {
		err  error
		want actuation.Code
	}{
		{fmt.Errorf("guest of environment e: %w", actuation.Refusef(actuation.CodeVMNotRunning, "no VM runs")), actuation.CodeVMNotRunning},
		{guest(actuation.CodeNotFound), actuation.CodeCwdNotAllowed},
		{guest(actuation.CodePathTraversal), actuation.CodeCwdNotAllowed},
		{guest(actuation.CodeNonceMismatch), actuation.CodeEnvironmentUnavailable},
		{guest(actuation.CodeProcessCapReached), actuation.CodeCommandCapReached},
		{guest(actuation.CodeTimeoutAboveDeadline), actuation.CodeTimeoutAboveMax},
		{guest(actuation.CodeExecFailed), actuation.CodeStartFailed},
		{fmt.Errorf("connect: %w", guestclient.ErrProtocol), actuation.CodeStartFailed},
	} {
		if got := e.RefusalCode(tc.err); got != tc.want {
			t.Errorf("RefusalCode(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

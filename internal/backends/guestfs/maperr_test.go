package guestfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/guestclient"
)

// TestMapErrTellsGuestFromBroker: with one refusal type, mapErr tells the guest's refusal
// (guestclient's ErrGuestRefused marker) from the broker's and from its own: a guest code
// is mapped onto fsaccess's, a broker or already mapped refusal passes unchanged, and a
// guest refusal without a node counterpart (io-error) stays uncoded, as before.
func TestMapErrTellsGuestFromBroker(t *testing.T) {
	r, err := New(func(context.Context) (*guestclient.Client, error) { return nil, errors.New("no guest") }, "root")
	if err != nil {
		t.Fatal(err)
	}
	guest := func(c actuation.Code) error {
		return fmt.Errorf("file.read: %w", &actuation.Refusal{Code: c, Message: "x", Cause: guestclient.ErrGuestRefused})
	}
	notFound := r.mapErr("read", "a/b", guest(actuation.CodeNotFound))
	if actuation.CodeOf(notFound) != actuation.CodePathNotFound || !errors.Is(notFound, fs.ErrNotExist) {
		t.Fatalf("guest not-found mapped to %q (%v), want path-not-found wrapping fs.ErrNotExist", actuation.CodeOf(notFound), notFound)
	}
	if again := r.mapErr("read", "a/b", notFound); again != notFound {
		t.Fatalf("a mapped refusal was mapped again: %v", again)
	}
	broker := fmt.Errorf("guest of environment e: %w", actuation.Refusef(actuation.CodeVMNotRunning, "no VM runs"))
	if got := r.mapErr("read", "a/b", broker); got != broker {
		t.Fatalf("the broker's refusal was changed: %v", got)
	}
	for code, want := range map[actuation.Code]actuation.Code{
		actuation.CodeTooLarge:         actuation.CodeTooManyEntries,
		actuation.CodeNonceMismatch:    actuation.CodeEnvironmentUnavailable,
		actuation.CodePathTraversal:    actuation.CodePathTraversal,
		actuation.CodeAnswerOverBound:  actuation.CodeAnswerOverBound,
		actuation.CodeIOError:          "",
		actuation.CodeExecFailed:       "",
		actuation.CodeNotRegularFile:   actuation.CodeNotRegularFile,
		actuation.CodeDeadlineExceeded: actuation.CodeEnvironmentUnavailable,
	} {
		if got := actuation.CodeOf(r.mapErr("read", "a/b", guest(code))); got != want {
			t.Errorf("guest %s mapped to %q, want %q", code, got, want)
		}
	}
}

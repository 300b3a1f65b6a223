package refusal

import (
	"errors"
	"fmt"
	"testing"
)

func TestRefusalMatching(t *testing.T) {
	err := fmt.Errorf("open session: %w", New(QueueFull, "depth %d", 256))
	if CodeOf(err) != QueueFull || !Is(err, QueueFull) || Is(err, SessionCapReached) {
		t.Fatalf("code of %v = %q", err, CodeOf(err))
	}
	if !errors.Is(err, &Error{Code: QueueFull}) || errors.Is(err, &Error{Code: EgressForbidden}) {
		t.Fatal("errors.Is must match by code")
	}
	if got := err.Error(); got != "open session: refused: queue-full: depth 256" {
		t.Fatalf("message %q", got)
	}
	if CodeOf(errors.New("plain")) != "" || CodeOf(nil) != "" {
		t.Fatal("non-refusals have no code")
	}
}

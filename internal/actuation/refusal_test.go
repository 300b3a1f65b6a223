package actuation

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestCodeOfReadsTheChain(t *testing.T) {
	r := Refusef(CodeQueueFull, "%d queued", 3)
	wrapped := fmt.Errorf("start: %w", r)
	if got := CodeOf(wrapped); got != CodeQueueFull {
		t.Fatalf("CodeOf(wrapped) = %q, want %q", got, CodeQueueFull)
	}
	if got := CodeOf(errors.New("plain")); got != "" {
		t.Fatalf("CodeOf(plain error) = %q, want empty", got)
	}
	if got := CodeOf(nil); got != "" {
		t.Fatalf("CodeOf(nil) = %q, want empty", got)
	}
	if !errors.Is(wrapped, &Refusal{Code: CodeQueueFull}) {
		t.Fatal("errors.Is does not match a refusal by its code")
	}
	if errors.Is(wrapped, &Refusal{Code: CodeSessionCapReached}) {
		t.Fatal("errors.Is matches a refusal of another code")
	}
}

func TestWrapfKeepsTheCause(t *testing.T) {
	r := Wrapf(CodePathNotFound, fs.ErrNotExist, "open %q", "a/b")
	if !errors.Is(r, fs.ErrNotExist) {
		t.Fatal("the cause is not reachable through errors.Is")
	}
	if got, want := r.Error(), `path-not-found: open "a/b": file does not exist`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got, want := Refuse(CodeInvalidSpec, "spec.argv", "must not be empty").Error(), "invalid-spec: spec.argv: must not be empty"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

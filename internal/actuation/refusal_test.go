package actuation

import (
	"crypto/sha256"
	"encoding/hex"
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

func TestPatchDigest(t *testing.T) {
	text := "--- a/x\n+++ b/x\n"
	got, err := PatchDigest(&text, nil)
	if err != nil || got != "sha256:"+sha256Hex(text) {
		t.Fatalf("PatchDigest(unified) = %q, %v", got, err)
	}
	ops := []map[string]string{{"op": "write", "path": "a"}}
	got, err = PatchDigest(nil, ops)
	want, _ := Digest(ops)
	if err != nil || got != want {
		t.Fatalf("PatchDigest(structured) = %q, %v; want %q", got, err, want)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

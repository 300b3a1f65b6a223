package actuation

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCodesSortedUniqueKnown(t *testing.T) {
	cs := Codes()
	if !slices.IsSorted(cs) {
		t.Fatalf("Codes() is not sorted: %v", cs)
	}
	if len(slices.Compact(slices.Clone(cs))) != len(cs) {
		t.Fatalf("Codes() has duplicates")
	}
	if len(cs) != len(allCodes) {
		t.Fatalf("allCodes lists a code twice: %d listed, %d unique", len(allCodes), len(cs))
	}
	for _, c := range cs {
		if !IsKnownCode(c) {
			t.Errorf("IsKnownCode(%q) = false", c)
		}
		if string(c) != strings.ToLower(string(c)) || strings.ContainsAny(string(c), " _") {
			t.Errorf("code %q must be lower-case kebab", c)
		}
	}
	for _, c := range []Code{"", "Path-Traversal", "path_traversal", "unknown"} {
		if IsKnownCode(c) {
			t.Errorf("IsKnownCode(%q) = true", c)
		}
	}
	// Codes returns a copy.
	cs[0] = "mutated"
	if Codes()[0] == "mutated" {
		t.Fatal("Codes() exposes its backing array")
	}
}

func TestRefusalError(t *testing.T) {
	r := Refuse(CodeArgvNotAdmitted, "spec.argv[2]", "must start with one of %q", []string{"./"})
	if got, want := r.Error(), `argv-not-admitted: spec.argv[2]: must start with one of ["./"]`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	r = Refuse(CodeQueueFull, "", "must not exceed %d queued inputs", 256)
	if got, want := r.Error(), "queue-full: must not exceed 256 queued inputs"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var nilRefusal *Refusal
	if nilRefusal.Err() != nil {
		t.Error("nil refusal must give a nil error")
	}
	var target *Refusal
	if err := r.Err(); !errors.As(err, &target) || target.Code != CodeQueueFull {
		t.Errorf("Err() must unwrap to the refusal, got %v", err)
	}
	if FirstRefusal(nil) != nil {
		t.Error("FirstRefusal(nil) must be nil")
	}
}

package fsaccess

import (
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/testkit"
)

// TestSharedRelativePathVectors runs the repository's golden path vectors
// (shared with internal/actuation) against CheckRel, so the lexical pre-check
// here refuses with the same code as the actuation core.
func TestSharedRelativePathVectors(t *testing.T) {
	for _, v := range testkit.RelativePathVectors(t) {
		if got := string(actuation.CodeOf(CheckRel(v.Path, v.RequireFile))); got != v.Code {
			t.Errorf("%s: CheckRel(%q, %v) = %q, want %q", v.Name, v.Path, v.RequireFile, got, v.Code)
		}
	}
}

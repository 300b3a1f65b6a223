package cgroups

import (
	"regexp"
	"strings"
	"testing"
)

// TestValidIDMatchesPattern: the hand-written id check accepts exactly what idPattern does,
// over every single byte at the first and a later position, the length bounds, and ids of
// the node agent's shapes.
func TestValidIDMatchesPattern(t *testing.T) {
	re := regexp.MustCompile(idPattern)
	ids := []string{"", "a", "A9", "-a", ".a", "_a", "a-b.c_d", "a b", "a/b", "ä", "a\x00",
		strings.Repeat("a", 127), strings.Repeat("a", 128), strings.Repeat("a", 129),
		"0b7c4c1e-6a8f-4f43-9d0a-5d2c1f0e8a11", "cmd-x", "a\n"}
	for c := 0; c < 256; c++ {
		ids = append(ids, string([]byte{byte(c)}), "a"+string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+"b")
	}
	for _, id := range ids {
		if got, want := validID(id), re.MatchString(id); got != want {
			t.Errorf("validID(%q) = %v, the pattern says %v", id, got, want)
		}
	}
}

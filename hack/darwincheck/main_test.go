package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestPlantedTypeErrorFails: a darwin-only file that misuses the real vz API fails the
// check with the exact error; the same code used correctly passes. Neither file is built
// on Linux, so only this check can tell them apart.
func TestPlantedTypeErrorFails(t *testing.T) {
	var out bytes.Buffer
	n, err := run([]string{"./testdata/clean"}, &out)
	if err != nil || n != 0 {
		t.Fatalf("clean: %d errors, %v:\n%s", n, err, out.String())
	}
	out.Reset()
	n, err = run([]string{"./testdata/planted"}, &out)
	if err != nil {
		t.Fatalf("planted: %v", err)
	}
	if n != 1 || !strings.Contains(out.String(), "planted_darwin.go:15") ||
		!strings.Contains(out.String(), "as []*vz.VirtioEntropyDeviceConfiguration value") {
		t.Fatalf("planted: %d errors, want the one planted:\n%s", n, out.String())
	}
}

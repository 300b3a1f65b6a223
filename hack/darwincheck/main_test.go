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
	plantedFails(t, "clean", "planted", "planted_darwin.go:15", "as []*vz.VirtioEntropyDeviceConfiguration value")
}

// TestPlantedNodeErrorFails: darwin node code (importing the node's fsaccess and procexec
// as the node agent does) with a Linux-only assumption fails the check at the planted
// line; the same code done right passes.
func TestPlantedNodeErrorFails(t *testing.T) {
	plantedFails(t, "nodeclean", "nodeplanted", "nodeplanted_darwin.go:20", "st.Dev (variable of type int32)")
}

// plantedFails runs the check over testdata/clean, which must pass, and testdata/planted,
// which must fail with exactly one error whose text holds every want.
func plantedFails(t *testing.T, clean, planted string, want ...string) {
	t.Helper()
	var out bytes.Buffer
	n, err := run([]string{"./testdata/" + clean}, &out)
	if err != nil || n != 0 {
		t.Fatalf("%s: %d errors, %v:\n%s", clean, n, err, out.String())
	}
	out.Reset()
	n, err = run([]string{"./testdata/" + planted}, &out)
	if err != nil {
		t.Fatalf("%s: %v", planted, err)
	}
	found := n == 1
	for _, w := range want {
		found = found && strings.Contains(out.String(), w)
	}
	if !found {
		t.Fatalf("%s: %d errors, want the one planted:\n%s", planted, n, out.String())
	}
}

// TestLinuxOnlyDependencyFails: darwin code importing a pure-Go dependency that does not
// type-check for darwin fails the check, although none of this module's lines is wrong:
// the real darwin build would fail in the dependency.
func TestLinuxOnlyDependencyFails(t *testing.T) {
	var out bytes.Buffer
	n, err := run([]string{"./testdata/linuxdep"}, &out)
	if err != nil {
		t.Fatalf("linuxdep: %v", err)
	}
	if n != 1 || !strings.Contains(out.String(), "github.com/containerd/cgroups/v3 (dependency, pure Go") {
		t.Fatalf("linuxdep: %d errors, want the containerd dependency:\n%s", n, out.String())
	}
}

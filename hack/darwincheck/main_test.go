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

// TestPlantedNodeErrorFails: darwin node code (importing the node's fsaccess and procexec
// as the node agent does) with a Linux-only assumption fails the check at the planted
// line; the same code done right passes.
func TestPlantedNodeErrorFails(t *testing.T) {
	var out bytes.Buffer
	n, err := run([]string{"./testdata/nodeclean"}, &out)
	if err != nil || n != 0 {
		t.Fatalf("nodeclean: %d errors, %v:\n%s", n, err, out.String())
	}
	out.Reset()
	n, err = run([]string{"./testdata/nodeplanted"}, &out)
	if err != nil {
		t.Fatalf("nodeplanted: %v", err)
	}
	if n != 1 || !strings.Contains(out.String(), "nodeplanted_darwin.go:20") ||
		!strings.Contains(out.String(), "st.Dev (variable of type int32)") {
		t.Fatalf("nodeplanted: %d errors, want the one planted:\n%s", n, out.String())
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

package client

import (
	"errors"
	"slices"
	"strings"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// TestNormalizeArgvNeverRewrites (issue 25 item 9): an argv whose argv[0] names another
// executable is refused with argv-not-admitted naming the profile's executable, never
// turned into arguments of the profile's program; only the executable itself or its bare
// name is completed.
func TestNormalizeArgvNeverRewrites(t *testing.T) {
	p := &wbv1.CommandProfile{Spec: wbv1.CommandProfileSpec{Executable: "/usr/bin/git", FixedArgs: []string{"--no-pager"}}}
	p.Name = "git-readonly"
	for _, argv := range [][]string{
		{"/bin/sh", "-c", "id"},
		{"sh", "-c", "id"},
		{"/usr/local/bin/git", "status"}, // another binary with the same base name
		{"./git", "status"},
		{"status"},
		{"gitk"},
		{"--no-pager", "status"},
	} {
		out, err := normalizeArgv(p, argv)
		var e *Error
		if err == nil || !errors.As(err, &e) || e.Code != string(actuation.CodeArgvNotAdmitted) {
			t.Errorf("%q: got %q, %v; want argv-not-admitted", argv, out, err)
			continue
		}
		if !strings.Contains(e.Message, "/usr/bin/git") {
			t.Errorf("%q: message %q does not name the profile's executable", argv, e.Message)
		}
	}
	for _, c := range []struct{ in, want []string }{
		{[]string{"git", "status"}, []string{"/usr/bin/git", "--no-pager", "status"}},
		{[]string{"/usr/bin/git", "status"}, []string{"/usr/bin/git", "--no-pager", "status"}},
		{[]string{"git", "--no-pager", "log"}, []string{"/usr/bin/git", "--no-pager", "log"}},
		{[]string{"/usr/bin/git"}, []string{"/usr/bin/git", "--no-pager"}},
	} {
		out, err := normalizeArgv(p, c.in)
		if err != nil || !slices.Equal(out, c.want) {
			t.Errorf("%q -> %q, %v; want %q", c.in, out, err, c.want)
		}
	}
}

package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestEveryCommandParses runs --help on every command of the tree: cobra merges the
// kubectl flags lazily, so a clashing shorthand only panics when a command is used.
func TestEveryCommandParses(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	walk(NewCommand(genericiooptions.NewTestIOStreamsDiscard()), nil)
	if len(paths) < 20 {
		t.Fatalf("only %d commands", len(paths))
	}
	for _, p := range paths {
		var out bytes.Buffer
		streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}
		if code := Main(append(p, "--help"), streams); code != 0 {
			t.Fatalf("%v --help exited %d: %s", p, code, out.String())
		}
	}
}

// TestUsageExitCode: malformed invocations exit 64.
func TestUsageExitCode(t *testing.T) {
	for _, args := range [][]string{{"run"}, {"env", "ls", "--nope"}, {"env", "ls", "-o", "table"}, {"nope"}} {
		var out bytes.Buffer
		if code := Main(args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}); code != 64 {
			t.Errorf("%v exited %d, want 64: %s", args, code, out.String())
		}
	}
}

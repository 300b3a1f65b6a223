//go:build !linux

package sandboxhelper

import (
	"fmt"
	"os"
)

// Arg marks the helper invocation in argv[1].
const Arg = "__sensorium_procexec_sandbox_helper__"

// MaybeRun fails a sandbox-helper invocation with the helper's failure exit, running
// nothing: the sandbox exists only on Linux.
func MaybeRun() {
	if len(os.Args) == 2 && os.Args[1] == Arg {
		fmt.Fprintln(os.Stderr, "workbench-sandbox: the sandbox needs Linux")
		os.Exit(126)
	}
}

// Command helper is a minimal sandbox helper binary for procexec tests and
// benchmarks (see Limits.HelperPath): it only runs sandboxhelper.MaybeRun,
// as cmd/workbench-sandbox does.
package main

import (
	"fmt"
	"os"

	"sensorium.dev/workbench/internal/platform/procexec/sandboxhelper"
)

func main() {
	sandboxhelper.MaybeRun()
	fmt.Fprintln(os.Stderr, "helper: not a sandbox helper invocation")
	os.Exit(2)
}

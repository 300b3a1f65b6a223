// Command helper is a minimal sandbox helper binary for procexec tests and
// benchmarks (see Limits.HelperPath): it only runs MaybeRunHelper.
package main

import (
	"fmt"
	"os"

	"sensorium.dev/workbench/internal/platform/procexec"
)

func main() {
	procexec.MaybeRunHelper()
	fmt.Fprintln(os.Stderr, "helper: not a sandbox helper invocation")
	os.Exit(2)
}

// Command workbench-sandbox is the node agent's small sandbox helper: the agent starts every
// structured command through it (a fresh network namespace with loopback only, Landlock,
// seccomp, no_new_privs, then exec of the argv). Keeping it separate from the agent binary
// spares every command the agent's package initialisation. The agent uses it when it sits
// next to the agent's executable, or when its configuration names it.
package main

import (
	"fmt"
	"os"

	"sensorium.dev/workbench/internal/nodeagent/procexec"
)

func main() {
	procexec.MaybeRunHelper()
	fmt.Fprintln(os.Stderr, "workbench-sandbox: run only by the node agent")
	os.Exit(2)
}

// Command workbench-sandbox is the node agent's small sandbox helper: the agent starts every
// structured command and PTY program through it (new user, PID, mount, UTS, IPC, cgroup and
// network namespaces, a minimal pivot_root root with idmapped roots, no capabilities,
// no_new_privs, Landlock and Docker-default seccomp; it stays as PID 1 of the sandbox; see
// docs/security.md, "Mechanism"). Keeping it separate from the agent binary
// spares every command the agent's package initialisation. The agent uses it when it sits
// next to the agent's executable, or when its configuration names it.
package main

import (
	"fmt"
	"os"

	"sensorium.dev/workbench/internal/platform/procexec/sandboxhelper"
)

func main() {
	sandboxhelper.MaybeRun()
	fmt.Fprintln(os.Stderr, "workbench-sandbox: run only by the node agent")
	os.Exit(2)
}

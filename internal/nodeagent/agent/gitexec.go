package agent

import (
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
)

// resolveExecutable and gitPinnedEnv are nodekit's (the command path and the session room
// share them).
func resolveExecutable(exe string) string { return nodekit.ResolveExecutable(exe) }

func gitPinnedEnv(declared, resolved string, env []actuation.EnvVar) []actuation.EnvVar {
	return nodekit.GitPinnedEnv(declared, resolved, env)
}

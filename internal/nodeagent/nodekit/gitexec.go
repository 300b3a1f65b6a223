package nodekit

import (
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// ResolveExecutable is the program the node would start for exe: its symlink-resolved
// path on the node ("" when it cannot be resolved; the start then fails on its own).
func ResolveExecutable(exe string) string { return procexec.ResolveExecutable(exe) }

// GitPinnedEnv returns env with the node's git configuration in force when the declared
// or the resolved executable is git (issue 25 item 2: the node, not the profile, fixes
// safe.bareRepository, core.hooksPath, core.fsmonitor and protocol.allow).
func GitPinnedEnv(declared, resolved string, env []actuation.EnvVar) []actuation.EnvVar {
	if !actuation.IsGit(declared) && (resolved == "" || !actuation.IsGit(resolved)) {
		return env
	}
	return actuation.WithGitPinnedConfig(env, actuation.GitEmptyHooksDir)
}

//go:build linux

package procexec

import (
	"bufio"
	"encoding/json"
	"fmt"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"sensorium.dev/workbench/internal/platform/procexec/sandboxhelper"
)

// The sandbox helper's side (what runs between its clone and the program's exec) is
// package sandboxhelper, which the helper binary (cmd/workbench-sandbox) links alone; this
// file names what the parent shares with it: the invocation, the configuration it
// sends on fd 3 and the reports it reads on fd 4.
const (
	// HelperArg marks the helper invocation in argv[1].
	HelperArg      = sandboxhelper.Arg
	helperEnvKey   = sandboxhelper.EnvKey
	helperEnvValue = sandboxhelper.EnvValue
	helperExecFD   = sandboxhelper.ExecFD
	helperFailExit = sandboxhelper.FailExit

	// MinLandlockABI is the lowest Landlock ABI accepted: v3 is the first
	// that also confines truncate(2), so writes outside the roots are fully
	// denied. Below it Start refuses with refusal.LandlockUnavailable.
	MinLandlockABI = sandboxhelper.MinLandlockABI

	// MaxGitWalkDirs and MaxGitRepos bound the git metadata protection's walk of the
	// writable roots (sandboxhelper, gitmeta_linux.go).
	MaxGitWalkDirs = sandboxhelper.MaxGitWalkDirs
	MaxGitRepos    = sandboxhelper.MaxGitRepos

	// goByte is the parent's go-ahead for a helper configured with AwaitGo.
	goByte = sandboxhelper.GoByte
)

// Mount kinds of the sandbox root (sandboxhelper.MountSpec).
const (
	mountBind    = sandboxhelper.MountBind
	mountDevBind = sandboxhelper.MountDevBind
	mountFD      = sandboxhelper.MountFD
	mountTmpfs   = sandboxhelper.MountTmpfs
	mountProc    = sandboxhelper.MountProc
	mountSymlink = sandboxhelper.MountSymlink
)

type (
	// helperConfig is what the parent sends on fd 3.
	helperConfig = sandboxhelper.Config
	// helperStatus is one report of the helper on fd 4.
	helperStatus = sandboxhelper.Status
	// mountSpec is one entry of the sandbox root.
	mountSpec = sandboxhelper.MountSpec
	// bpfProgram is the seccomp filter as it travels in the configuration.
	bpfProgram = sandboxhelper.BPFProgram
	// LeftProc is a process found alive in a sandbox after its program ended.
	LeftProc = sandboxhelper.LeftProc
)

// landlockABI reports the kernel's Landlock ABI (overridden in tests).
var landlockABI = ll.LandlockGetABIVersion

// PivotReadOnly makes root (a mount point in this thread's private mount namespace) the
// root: pivot_root onto it, detach the host tree, and make the new root read-only. The
// process sandbox and the VMM sandbox both end their root build with it.
func PivotReadOnly(root string) error { return sandboxhelper.PivotReadOnly(root) }

// MaybeRunHelper must be the first statement of main() in every binary that
// re-executes itself as the sandbox helper (and of TestMain in test binaries). In a
// normal invocation it returns immediately; in a sandbox-helper invocation it never
// returns. The deployed helper, cmd/workbench-sandbox, calls sandboxhelper.MaybeRun
// directly and links nothing of the parent.
func MaybeRunHelper() { sandboxhelper.MaybeRun() }

// readStatusLine reads one JSON line from the helper's status pipe.
func readStatusLine(r *bufio.Reader) (helperStatus, []byte, error) {
	var st helperStatus
	line, err := r.ReadSlice('\n')
	if err != nil {
		return st, line, err
	}
	if err := json.Unmarshal(line, &st); err != nil {
		return st, line, fmt.Errorf("undecodable sandbox helper report %q: %w", line, err)
	}
	return st, line, nil
}

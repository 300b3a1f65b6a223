//go:build darwin

package procexec

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/cgroups"
)

// On darwin there is no process sandbox: it is built from Linux user, mount, PID, UTS,
// IPC and network namespaces, idmapped mounts, Landlock and seccomp, none of which macOS
// has, and it never runs a program with weaker isolation. A Mac node offers only
// vfkit-system.v1, whose guest runs commands and sessions itself; every entry point here
// that would start a host process refuses with userns-unavailable (the code that already
// means "no namespaces for the sandbox: fail closed"), so a caller that reaches one by
// mistake fails visibly instead of running anything. The declarations mirror the Linux
// ones (spawn_linux.go, helper_linux.go, prestart_linux.go, terminal_prestart_linux.go,
// killgroup_linux.go, proc_linux.go) so the node agent type-checks for darwin
// (make darwin-check); their field sets must stay equal (SandboxSpec and Mount are
// shared: sandboxspec.go).

// noSandbox is the refusal of every darwin entry point that would start a host process.
func noSandbox(what string) error {
	return actuation.Refusef(actuation.CodeUserNamespaceUnavailable,
		"%s: the process sandbox needs Linux namespaces, Landlock and seccomp; a darwin node runs commands only in vfkit-system.v1 guests", what)
}

// DefaultSandboxUID is the host uid (and gid) that uid 0 of a sandbox's user
// namespace maps to (Linux).
const DefaultSandboxUID = 2147000000

// SandboxTmp is where a sandbox sees its private temp dir.
const SandboxTmp = "/tmp"

// SandboxHostname is the hostname inside every sandbox.
const SandboxHostname = "workbench-sandbox"

// HelperArg marks the sandbox helper invocation in argv[1].
const HelperArg = "__sensorium_procexec_sandbox_helper__"

// MinLandlockABI is the lowest Landlock ABI the Linux sandbox accepts.
const MinLandlockABI = 3

// ValidateMounts refuses: there are no sandbox mounts on darwin.
func ValidateMounts([]Mount) error { return noSandbox("sandbox mounts") }

// StartOptions are the parent-side settings of one sandbox.
type StartOptions struct {
	HelperPath            string
	UID                   uint32
	Stdin, Stdout, Stderr *os.File
	Terminal              bool
	BeforeConfig          func(pid int) error
	BeforeExec            func() error
}

// Sandboxed is a started sandbox; on darwin none is ever returned.
type Sandboxed struct {
	Process *os.Process
	Pid     int
}

// ExitStatus describes the helper's wait status.
func (s *Sandboxed) ExitStatus(ws unix.WaitStatus) (int, string) { return ExitDescription(ws) }

// Leftovers reports nothing: no sandbox ran.
func (s *Sandboxed) Leftovers() (int, []LeftProc) { return 0, nil }

// Close releases nothing.
func (s *Sandboxed) Close() {}

// LeftProc is a process found alive in a sandbox after its program ended.
type LeftProc struct {
	Pid  int    `json:"pid"`
	Ppid int    `json:"ppid"`
	Comm string `json:"comm"`
}

// StartSandboxed refuses (userns-unavailable).
func StartSandboxed(SandboxSpec, StartOptions) (*Sandboxed, error) {
	return nil, noSandbox("start a sandboxed process")
}

// CheckSandbox reports the refusal: the node's BackendCapability publishes it.
func CheckSandbox(StartOptions, string) error { return noSandbox("sandbox check") }

// MergeLeftovers has nothing to merge: no sandbox ever starts on darwin.
func MergeLeftovers(*CgroupReport, *Sandboxed) {}

// PivotReadOnly refuses: there are no mount namespaces.
func PivotReadOnly(string) error { return noSandbox("pivot into a read-only root") }

type helperConfig struct{}

type idmapSource struct{}

func prepareSandbox(SandboxSpec) (*helperConfig, []idmapSource, error) {
	return nil, nil, noSandbox("prepare a sandbox")
}

type helperProc struct{ pid int }

func (hp *helperProc) discard() {}

func (hp *helperProc) configure(*helperConfig, []idmapSource, func(int) error, func() error) (*Sandboxed, error) {
	return nil, noSandbox("configure a sandbox")
}

type pooledSandbox struct {
	hp     *helperProc
	outR   *os.File
	cgroup *cgroups.Group
}

// newSandboxPool keeps no pre-started helper: there is none to start.
func (r *Runner) newSandboxPool(int) *Pool[*pooledSandbox] { return nil }

func (r *Runner) takePrestarted(cgroups.Limits) *pooledSandbox { return nil }

// PrestartedTerminal is a pre-started terminal helper; PrestartTerminal refuses on darwin.
type PrestartedTerminal struct{ hp *helperProc }

// PrestartTerminal refuses (userns-unavailable).
func PrestartTerminal(string, uint32, *os.File) (*PrestartedTerminal, error) {
	return nil, noSandbox("pre-start a terminal helper")
}

// Pid is the helper's pid.
func (p *PrestartedTerminal) Pid() int { return p.hp.pid }

// Alive is false: no helper runs.
func (p *PrestartedTerminal) Alive() bool { return false }

// Start refuses.
func (p *PrestartedTerminal) Start(SandboxSpec, func(pid int) error) (*Sandboxed, error) {
	return nil, noSandbox("start a terminal sandbox")
}

// Discard releases nothing.
func (p *PrestartedTerminal) Discard() {}

// KillGroupResult says how a KillGroupWait ended.
type KillGroupResult struct {
	Gone     bool
	Unreaped int
}

// KillGroupWait refuses: it waits on Linux pidfds of sandboxed process groups.
func KillGroupWait(int, time.Time) (KillGroupResult, error) {
	return KillGroupResult{}, noSandbox("kill and wait for a process group")
}

// EnableSubreaper refuses: macOS has no child subreaper.
func EnableSubreaper() error { return noSandbox("become a child subreaper") }

// WaitExitNoReap refuses: macOS has no waitid(WNOWAIT) here.
func WaitExitNoReap(pid int) error {
	return noSandbox(fmt.Sprintf("wait for pid %d without reaping", pid))
}

// MaybeRunHelper fails a sandbox-helper invocation with the helper's failure exit, running
// nothing (the guest PTY relay is the guest backend's: guestenv.MaybeRunRelay).
func MaybeRunHelper() {
	if len(os.Args) == 2 && os.Args[1] == HelperArg {
		fmt.Fprintln(os.Stderr, noSandbox("sandbox helper"))
		os.Exit(126)
	}
}

// Close has no pre-started helper to discard.
func (r *Runner) Close() {}

// Refill has no pool to top up.
func (r *Runner) Refill() {}

// Warm refuses: there are no sandbox helpers to pre-start.
func (r *Runner) Warm() error { return noSandbox("pre-start sandbox helpers") }

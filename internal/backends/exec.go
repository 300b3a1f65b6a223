package backends

import (
	"context"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// Executor is an opened environment's process executor (Env.Exec): one implementation
// runs processes in the node's sandbox (internal/backends/hostexec), one in a VM guest
// (internal/backends/guestenv). The rooms of the node agent call it without asking which
// one they hold; what a placement cannot do is a refusal the implementation returns with
// its code.
type Executor interface {
	// Command checks one admitted command against this placement's rules and bounds and
	// translates it (argv as admitted, the curated environment, the working directory
	// beneath its root, the timeout and the output budget). A refusal carries a code of
	// the closed vocabulary; nothing has started.
	Command(req CommandRequest) (Command, *actuation.Refusal)
	// ActionClasses refuses (action-class-unavailable) when this placement cannot enforce
	// the action classes' envelope (internal/nodeagent/actionexec); nil: it can.
	ActionClasses() *actuation.Refusal
	// Terminal checks one admitted PTY program against this placement's rules and
	// translates it into the host program the node's session manager runs in its sandbox:
	// the program itself beneath its root (host), or the node agent's own executable as
	// the relay to a guest that runs it (guest). A refusal carries a code of the closed
	// vocabulary; nothing has started.
	Terminal(req TerminalRequest) (Terminal, *actuation.Refusal)
}

// TerminalRequest is one admitted PTY program as the node decided it: its effective
// profile, the environment's mounted roots, the program (executable and fixed arguments)
// and its curated environment (KEY=VALUE, git-pinned).
type TerminalRequest struct {
	Profile actuation.Profile
	Roots   []MountedRoot
	// SessionID names the session (its TerminalSession's UID).
	SessionID string
	Argv      []string
	Env       []string
	// Relay is the node agent's own executable, which a placement whose programs run
	// elsewhere starts on the host as the relay to them.
	Relay string
}

// Terminal is the host program of a PTY session (Executor.Terminal): what the node's
// session manager starts in its sandbox.
type Terminal struct {
	Argv []string
	Env  []string
	// Dir is the program's working directory on the host.
	Dir string
	// WritableRoots and ReadableRoots are the host directories the program sees (the
	// profile's allowed roots; none for a relay).
	WritableRoots, ReadableRoots []string
	// HostRelay: the host program is the relay to a program running elsewhere.
	HostRelay bool
}

// CommandRequest is one admitted command as the node decided it: its effective profile,
// the environment's mounted roots, the intent and the curated environment (git-pinned).
type CommandRequest struct {
	Profile actuation.Profile
	Roots   []MountedRoot
	Intent  actuation.CommandIntent
	Env     []actuation.EnvVar
}

// Command is one admitted command translated for its placement (Executor.Command).
// Exactly one capability is set; it says how the command starts, and is the only thing
// that differs between placements:
//
//   - Sandbox (host): the node's sandbox starts the process under the exactly-once
//     sequence of a host process — the durable start record lands while the sandbox is
//     set up, the process gets its own cgroup, and its PID is recorded for crash recovery
//     (internal/nodeagent/runs.Table.Launch). The caller adds the node's resource limits
//     and trace marker.
//   - Remote (guest): the process runs to completion elsewhere (a VM guest), with no
//     host process, cgroup or PID; the start record is stored before it is dispatched.
type Command struct {
	Sandbox *procexec.Spec
	Remote  RemoteCommand
}

// RemoteCommand is a command run to completion outside the host sandbox (a VM guest).
type RemoteCommand interface {
	// Run runs the command to completion (or its timeout); opID names the process for a
	// remote signal. Ending ctx ends the wait; the caller bounds ctx by Wait.
	Run(ctx context.Context, opID string) (*guestclient.SpawnResult, error)
	// Wait bounds the wait for the remote report: the command's timeout plus the grace
	// in which the remote side, having ended the process at its timeout, answers.
	Wait() time.Duration
	// RefusalCode maps a Run error (the remote side's or the broker's refusal) onto the
	// closed vocabulary; the remote side's own code stays in the error's message.
	RefusalCode(err error) actuation.Code
}

package backends

import (
	"context"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/guestclient"
)

// Placement says where an opened environment's processes run and where its roots live.
type Placement string

// Placements.
const (
	// PlaceHost: the node's sandbox (internal/platform/procexec through the
	// workbench-sandbox helper) runs the environment's commands and PTY programs, and its
	// roots are host directories read and written through internal/platform/fsaccess
	// (host-local, fixture-copy.v1).
	PlaceHost Placement = "host"
	// PlaceGuest: a VM guest runs them and holds the roots, reached over the guest protocol
	// through the backend's host broker (qemu-microvm.v1); Env.Guest is set.
	PlaceGuest Placement = "guest"
)

// Env is one environment opened for work (Backend.Open): the executor that starts its
// commands and the access to its roots. Callers decide nothing from the backend's
// identity: they use the Env the backend hands out.
type Env struct {
	// ID is the environment's ID (Spec.ID).
	ID        string
	Placement Placement
	// Exec starts the environment's commands: the node's sandbox (hostexec) or the guest
	// (guestenv). Never nil in an Env a backend opened.
	Exec Executor
	// Roots opens the environment's roots for file access (files.go): the node's pinned
	// host directories (hostexec) or the guest's directories (guestenv). Never nil in an
	// Env a backend opened.
	Roots RootOpener
	// Guest is the guest channel of a PlaceGuest environment (nil for PlaceHost): what
	// the guest implementations of Exec (its commands and PTY relay) and Roots (guestfs)
	// use. The node agent reaches the guest only through Exec and Roots.
	Guest GuestEnv
}

// GuestEnv is the guest side of an Env beyond its executor (internal/backends/guestenv):
// every operation opens its own handshaken channel to the running boot, whose endpoint
// and binding the backend's broker pins (never the caller).
type GuestEnv interface {
	// Dial opens a handshaken channel to the guest agent (file operations); the caller
	// closes it.
	Dial(ctx context.Context) (*guestclient.Client, error)
	// Relay returns the host program of a PTY session whose program runs in the guest:
	// self (the node agent's own executable) in relay mode, and its one environment entry.
	// The relay's working directory on the host is "/".
	Relay(self string, r RelayRequest) (argv, env []string, err error)
}

// GuestCommand is one command translated for the guest (GuestEnv.Command).
type GuestCommand struct {
	Args protocol.SpawnArgs
	// Wait bounds the wait for the guest's report: the command's timeout plus the grace
	// in which the guest, having ended the process at its timeout, answers.
	Wait time.Duration
}

// RelayRequest is the guest side of a PTY session: its ID and the program, curated
// environment and working directory (beneath the guest root) it runs in the guest.
type RelayRequest struct {
	SessionID string
	Argv      []string
	Env       []string
	Cwd       string
}

package backends

import (
	"context"

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
// commands and PTY programs and the access to its roots. Callers decide nothing from the
// backend's identity: they use the Env the backend hands out.
type Env struct {
	// ID is the environment's ID (Spec.ID).
	ID        string
	Placement Placement
	// Guest is the guest executor and file channel of a PlaceGuest environment; nil for
	// PlaceHost, whose executor is the node's sandbox runner and whose file access is the
	// pinned fsaccess root of each mounted root (MountedRoot.Path).
	Guest GuestEnv
}

// HostEnv is the Env of a host-sandbox environment.
func HostEnv(id string) Env { return Env{ID: id, Placement: PlaceHost} }

// GuestEnv is the guest implementation of the executor and file access
// (internal/backends/guestenv): every operation opens its own handshaken channel to the
// running boot, whose endpoint and binding the backend's broker pins (never the caller).
type GuestEnv interface {
	// Dial opens a handshaken channel to the guest agent (file operations); the caller
	// closes it.
	Dial(ctx context.Context) (*guestclient.Client, error)
	// Spawn runs one structured command inside the guest to completion (or its timeout);
	// opID names the process for a guest-side signal. Ending ctx ends the wait.
	Spawn(ctx context.Context, opID string, args protocol.SpawnArgs) (*guestclient.SpawnResult, error)
	// Relay returns the host program of a PTY session whose program runs in the guest:
	// self (the node agent's own executable) in relay mode, and its one environment entry.
	// The relay's working directory on the host is "/".
	Relay(self string, r RelayRequest) (argv, env []string, err error)
}

// RelayRequest is the guest side of a PTY session: its ID and the program, curated
// environment and working directory (beneath the guest root) it runs in the guest.
type RelayRequest struct {
	SessionID string
	Argv      []string
	Env       []string
	Cwd       string
}

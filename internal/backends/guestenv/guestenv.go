// Package guestenv is the guest implementation of the backends.Env port: an environment
// whose commands, PTY programs and roots live inside a VM guest. Commands are spawned over
// the guest protocol (internal/guestclient over vsock), file operations open their own
// channels (internal/backends/guestfs wraps Dial), and a PTY session runs the node
// agent's own executable as the guest PTY relay (relay.go). The VM backend supplies the
// Broker: endpoint, socket identity and the boot's binding come from its recovery record,
// never from a caller.
package guestenv

import (
	"context"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
)

// Broker is a VM backend's host broker for the guests of its running boots.
type Broker interface {
	// Guest opens a handshaken channel to environment id's guest.
	Guest(ctx context.Context, id string) (*guestclient.Client, error)
	// GuestChannel returns the pinned endpoint and the boot's binding, for a helper
	// process of the node agent that opens its own channels (the relay).
	GuestChannel(id string) (guestclient.Endpoint, protocol.Binding, error)
}

// Open returns the Env of environment id behind b.
func Open(b Broker, id string) backends.Env {
	e := &env{b: b, id: id}
	return backends.Env{ID: id, Placement: backends.PlaceGuest, Exec: executor{e}, Roots: e, Guest: e}
}

type env struct {
	b  Broker
	id string
}

var _ backends.GuestEnv = (*env)(nil)

func (e *env) Dial(ctx context.Context) (*guestclient.Client, error) { return e.b.Guest(ctx, e.id) }

func (e *env) Spawn(ctx context.Context, opID string, cmd backends.GuestCommand) (*guestclient.SpawnResult, error) {
	c, err := e.b.Guest(ctx, e.id)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() }) // cancellation ends the wait
	defer func() {
		stop()
		_ = c.Close()
	}()
	return c.Spawn(ctx, opID, cmd.Args)
}

func (e *env) Relay(self string, r backends.RelayRequest) ([]string, []string, error) {
	ep, binding, err := e.b.GuestChannel(e.id)
	if err != nil {
		if actuation.CodeOf(err) == "" {
			err = actuation.Wrapf(actuation.CodeEnvironmentUnavailable, err, "%v", err)
		}
		return nil, nil, err
	}
	if err := (&protocol.PTYOpenArgs{SessionID: r.SessionID, Argv: r.Argv, Env: r.Env, Cwd: r.Cwd, Rows: 1, Cols: 1}).Validate(); err != nil {
		return nil, nil, actuation.Wrapf(actuation.CodeInvalidSpec, err, "%v", err)
	}
	kv, err := RelayConfig{Endpoint: ep, Binding: binding, SessionID: r.SessionID, Argv: r.Argv, Env: r.Env, Cwd: r.Cwd}.Environ()
	if err != nil {
		return nil, nil, actuation.Wrapf(actuation.CodeInvalidSpec, err, "%v", err)
	}
	if self == "" {
		return nil, nil, actuation.Refusef(actuation.CodeCapabilityMismatch, "guest terminal: the node agent has no relay executable")
	}
	return []string{self, RelayArg}, []string{kv}, nil
}

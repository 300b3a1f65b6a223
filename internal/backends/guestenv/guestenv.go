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
	"time"

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
	return backends.Env{ID: id, Exec: executor{e}, Roots: e}
}

// env is the guest side of one environment: every operation opens its own handshaken
// channel to the running boot, whose endpoint and binding the broker pins (never the
// caller). Its executor (exec.go) and file access (files.go) are all the node reaches.
type env struct {
	b  Broker
	id string
}

// guestCommand is one command translated for the guest (env.Command).
type guestCommand struct {
	Args protocol.SpawnArgs
	// Wait bounds the wait for the guest's report: the command's timeout plus the grace
	// in which the guest, having ended the process at its timeout, answers.
	Wait time.Duration
}

// relayRequest is the guest side of a PTY session: its ID and the program, curated
// environment and working directory (beneath the guest root) it runs in the guest.
type relayRequest struct {
	SessionID string
	Argv      []string
	Env       []string
	Cwd       string
}

// Dial opens a handshaken channel to the guest agent (file operations); the caller closes
// it.
func (e *env) Dial(ctx context.Context) (*guestclient.Client, error) { return e.b.Guest(ctx, e.id) }

func (e *env) Spawn(ctx context.Context, opID string, cmd guestCommand) (*guestclient.SpawnResult, error) {
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

// Relay returns the host program of a PTY session whose program runs in the guest: self
// (the node agent's own executable) in relay mode, and its one environment entry. The
// relay's working directory on the host is "/".
func (e *env) Relay(self string, r relayRequest) ([]string, []string, error) {
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

package guestenv

import (
	"context"
	"errors"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
)

// executor is the guest implementation of backends.Executor: a command is checked and
// translated for the guest (env.Command) and runs to completion there (Command.Remote).
type executor struct{ e *env }

var _ backends.Executor = executor{}

// errActionClasses refuses action classes in a guest: their envelope (network namespace,
// egress proxy, writes capture) is the host sandbox's.
var errActionClasses = &actuation.Refusal{Code: actuation.CodeActionClassUnavailable,
	Message: "action classes are enforced by the host sandbox; the environment runs in a VM guest"}

func (executor) ActionClasses() *actuation.Refusal { return errActionClasses }

func (x executor) Command(req backends.CommandRequest) (backends.Command, *actuation.Refusal) {
	gc, ref := x.e.Command(req.Roots, req.Intent, req.Env)
	if ref != nil {
		return backends.Command{}, ref
	}
	return backends.Command{Remote: remote{e: x.e, gc: gc}}, nil
}

// remote is one command translated for the guest.
type remote struct {
	e  *env
	gc guestCommand
}

func (r remote) Run(ctx context.Context, opID string) (*guestclient.SpawnResult, error) {
	return r.e.Spawn(ctx, opID, r.gc)
}

func (r remote) Wait() time.Duration { return r.gc.Wait }

func (r remote) RefusalCode(err error) actuation.Code { return r.e.RefusalCode(err) }

// Terminal runs the PTY program in the guest, in the first allowed root's directory
// beneath the guest root: the host program is the relay (Relay) to it, working in "/" and
// seeing no host root.
func (x executor) Terminal(req backends.TerminalRequest) (backends.Terminal, *actuation.Refusal) {
	dir := ""
	for _, r := range req.Roots {
		if len(req.Profile.AllowedRoots) > 0 && r.Name == req.Profile.AllowedRoots[0] {
			dir = r.GuestDir
		}
	}
	if dir == "" {
		return backends.Terminal{}, actuation.Refusef(actuation.CodeRootNotAllowed, "no root of the environment is allowed by the profile")
	}
	argv, env, err := x.e.Relay(req.Relay, relayRequest{SessionID: req.SessionID, Argv: req.Argv, Env: req.Env, Cwd: dir})
	if err != nil {
		ref := &actuation.Refusal{Code: actuation.CodeOf(err), Message: err.Error()}
		var r *actuation.Refusal
		if errors.As(err, &r) {
			ref.Message = r.Message
		}
		if ref.Code == "" {
			ref.Code = actuation.CodeEnvironmentUnavailable
		}
		return backends.Terminal{}, ref
	}
	return backends.Terminal{Argv: argv, Env: env, Dir: "/", HostRelay: true}, nil
}

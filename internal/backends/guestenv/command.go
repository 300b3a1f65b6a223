package guestenv

import (
	"fmt"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
)

// reportGrace is how long past the command's own timeout the node agent waits for the
// guest's report (the guest ends the process at its timeout and answers just after).
const reportGrace = 15 * time.Second

// Command builds the guest spawn of a structured command: argv as admitted, the curated
// environment, the working directory beneath the guest root (<root>[/<path>], i.e.
// /workspace/<root>/... in the guest), the timeout and one output budget.
func (e *env) Command(roots []backends.MountedRoot, in actuation.CommandIntent, envVars []actuation.EnvVar) (guestCommand, *actuation.Refusal) {
	dir := ""
	for _, r := range roots {
		if r.Name == in.Cwd.Root {
			dir = r.GuestDir
		}
	}
	if dir == "" {
		return guestCommand{}, &actuation.Refusal{Code: actuation.CodeRootNotAllowed, Message: "root " + in.Cwd.Root + " is not a root of the environment"}
	}
	if in.Cwd.Path != "" {
		dir += "/" + in.Cwd.Path
	}
	if err := protocol.CheckPath(dir, false); err != nil {
		return guestCommand{}, &actuation.Refusal{Code: actuation.CodeCwdNotAllowed, Message: err.Error()}
	}
	timeout := time.Duration(in.TimeoutSeconds) * time.Second
	if timeout <= 0 || timeout+reportGrace > time.Duration(protocol.MaxDeadlineMS)*time.Millisecond {
		return guestCommand{}, &actuation.Refusal{Code: actuation.CodeTimeoutAboveMax, Message: fmt.Sprintf("a guest command's timeout must be 1s..%v", time.Duration(protocol.MaxDeadlineMS)*time.Millisecond-reportGrace)}
	}
	if in.OutputBytes <= 0 || in.OutputBytes > protocol.MaxOutputBytes {
		return guestCommand{}, &actuation.Refusal{Code: actuation.CodeOutputCapAboveMax, Message: fmt.Sprintf("a guest command's output cap must be 1..%d bytes", protocol.MaxOutputBytes)}
	}
	kv := make([]string, 0, len(envVars))
	for _, v := range envVars {
		kv = append(kv, v.Name+"="+v.Value)
	}
	args := protocol.SpawnArgs{Argv: in.Argv, Env: kv, Cwd: dir, TimeoutMS: uint32(timeout / time.Millisecond), OutputMax: uint32(in.OutputBytes)}
	return guestCommand{Args: args, Wait: timeout + reportGrace}, nil
}

// RefusalCode maps a guest or broker refusal onto the closed vocabulary (the guest's own
// code stays in the message).
func (e *env) RefusalCode(err error) actuation.Code {
	gc := guestclient.GuestCode(err)
	if c := actuation.CodeOf(err); gc == "" && c != "" {
		return c // the broker's own refusal
	}
	if protocol.IsPathCode(gc) {
		return actuation.CodeCwdNotAllowed
	}
	switch gc {
	case actuation.CodeQuiesced, actuation.CodeShuttingDown, actuation.CodeGenerationMismatch, actuation.CodeNonceMismatch,
		actuation.CodeEnvironmentMismatch, actuation.CodePlanDigestMismatch, actuation.CodeImageDigestMismatch:
		return actuation.CodeEnvironmentUnavailable
	case actuation.CodeNotFound, actuation.CodeNotDirectory, actuation.CodeSymlinkEscape:
		return actuation.CodeCwdNotAllowed
	case actuation.CodeProcessCapReached, actuation.CodeConnectionCap:
		return actuation.CodeCommandCapReached
	case actuation.CodeTimeoutAboveDeadline:
		return actuation.CodeTimeoutAboveMax
	case actuation.CodeOutputCapAboveMax:
		return actuation.CodeOutputCapAboveMax
	case actuation.CodeInvalidSpec:
		return actuation.CodeInvalidSpec
	}
	return actuation.CodeStartFailed
}

package guestenv

import (
	"fmt"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
)

// reportGrace is how long past the command's own timeout the node agent waits for the
// guest's report (the guest ends the process at its timeout and answers just after).
const reportGrace = 15 * time.Second

// Command builds the guest spawn of a structured command: argv as admitted, the curated
// environment, the working directory beneath the guest root (<root>[/<path>], i.e.
// /workspace/<root>/... in the guest), the timeout and one output budget.
func (e *env) Command(roots []backends.MountedRoot, in actuation.CommandIntent, envVars []actuation.EnvVar) (backends.GuestCommand, *actuation.Refusal) {
	dir := ""
	for _, r := range roots {
		if r.Name == in.Cwd.Root {
			dir = r.GuestDir
		}
	}
	if dir == "" {
		return backends.GuestCommand{}, &actuation.Refusal{Code: actuation.CodeRootNotAllowed, Message: "root " + in.Cwd.Root + " is not a root of the environment"}
	}
	if in.Cwd.Path != "" {
		dir += "/" + in.Cwd.Path
	}
	if err := protocol.CheckPath(dir, false); err != nil {
		return backends.GuestCommand{}, &actuation.Refusal{Code: actuation.CodeCwdNotAllowed, Message: err.Error()}
	}
	timeout := time.Duration(in.TimeoutSeconds) * time.Second
	if timeout <= 0 || timeout+reportGrace > time.Duration(protocol.MaxDeadlineMS)*time.Millisecond {
		return backends.GuestCommand{}, &actuation.Refusal{Code: actuation.CodeTimeoutAboveMax, Message: fmt.Sprintf("a guest command's timeout must be 1s..%v", time.Duration(protocol.MaxDeadlineMS)*time.Millisecond-reportGrace)}
	}
	if in.OutputBytes <= 0 || in.OutputBytes > protocol.MaxOutputBytes {
		return backends.GuestCommand{}, &actuation.Refusal{Code: actuation.CodeOutputCapAboveMax, Message: fmt.Sprintf("a guest command's output cap must be 1..%d bytes", protocol.MaxOutputBytes)}
	}
	kv := make([]string, 0, len(envVars))
	for _, v := range envVars {
		kv = append(kv, v.Name+"="+v.Value)
	}
	args := protocol.SpawnArgs{Argv: in.Argv, Env: kv, Cwd: dir, TimeoutMS: uint32(timeout / time.Millisecond), OutputMax: uint32(in.OutputBytes)}
	return backends.GuestCommand{Args: args, Wait: timeout + reportGrace}, nil
}

// RefusalCode maps a guest or broker refusal onto the closed vocabulary (the guest's own
// code stays in the message).
func (e *env) RefusalCode(err error) actuation.Code {
	if c := actuation.CodeOf(err); c != "" {
		return c // the broker's codes are actuation's
	}
	if protocol.IsPathCode(protocol.CodeOf(err)) {
		return actuation.CodeCwdNotAllowed
	}
	switch protocol.CodeOf(err) {
	case string(actuation.CodeQuiesced), string(actuation.CodeShuttingDown), string(actuation.CodeGenerationMismatch), string(actuation.CodeNonceMismatch),
		string(actuation.CodeEnvironmentMismatch), string(actuation.CodePlanDigestMismatch), string(actuation.CodeImageDigestMismatch):
		return actuation.CodeEnvironmentUnavailable
	case string(actuation.CodeNotFound), string(actuation.CodeNotDirectory), string(actuation.CodeSymlinkEscape):
		return actuation.CodeCwdNotAllowed
	case string(actuation.CodeProcessCapReached), string(actuation.CodeConnectionCap):
		return actuation.CodeCommandCapReached
	case string(actuation.CodeTimeoutAboveDeadline):
		return actuation.CodeTimeoutAboveMax
	case string(actuation.CodeOutputCapAboveMax):
		return actuation.CodeOutputCapAboveMax
	case string(actuation.CodeInvalidSpec):
		return actuation.CodeInvalidSpec
	}
	return actuation.CodeStartFailed
}

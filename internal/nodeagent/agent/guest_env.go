package agent

import (
	"errors"
	"fmt"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
)

// openEnv asks env's backend for the environment's executor and file access (the
// backends.Env port): the one place that says whether the environment's processes and
// roots live on the host or in a VM guest. An unregistered backend is refused.
func (a *Agent) openEnv(env *wbv1.Environment) (backends.Env, error) {
	b, ok := a.backends.Get(string(env.Spec.Backend))
	if !ok {
		return backends.Env{}, actuation.Refusef(actuation.CodeCapabilityMismatch, "backend %s is not registered on this node", env.Spec.Backend)
	}
	return b.Open(string(env.UID))
}

// executorOf is env's executor (backends.Env.Exec): the host sandbox or the guest; an
// unregistered backend, or one that offers no executor, is refused with its code.
func (a *Agent) executorOf(env *wbv1.Environment) (backends.Executor, error) {
	e, err := a.openEnv(env)
	if err != nil {
		return nil, err
	}
	if e.Exec == nil {
		return nil, actuation.Refusef(actuation.CodeCapabilityMismatch, "backend %s offers no executor", env.Spec.Backend)
	}
	return e.Exec, nil
}

// guestEnvOf is env's guest channel, nil when its processes run in the host sandbox (or
// its backend offers no executor: the host path then refuses on its roots, as before).
func (a *Agent) guestEnvOf(env *wbv1.Environment) backends.GuestEnv {
	e, err := a.openEnv(env)
	if err != nil {
		return nil
	}
	return e.Guest
}

// guestRelay turns a shell-profile session of a VM environment into the host session that
// runs this executable as the guest PTY relay (internal/backends/guestenv): the program,
// its curated environment and its working directory (the root beneath the guest root) go
// to the guest; on the host only the relay runs.
func (a *Agent) guestRelay(env *wbv1.Environment, ts *wbv1.TerminalSession, argv, kv []string, guestDir string) ([]string, []string, string, string, string) {
	g := a.guestEnvOf(env)
	if g == nil {
		return nil, nil, "", string(actuation.CodeCapabilityMismatch), fmt.Sprintf("backend %s offers no guest terminal", env.Spec.Backend)
	}
	rargv, renv, err := g.Relay(a.helper, backends.RelayRequest{SessionID: "s-" + string(ts.UID), Argv: argv, Env: kv, Cwd: guestDir})
	if err != nil {
		code, msg := string(actuation.CodeOf(err)), err.Error()
		var ref *actuation.Refusal
		if errors.As(err, &ref) {
			msg = ref.Message
		}
		if code == "" {
			code = string(actuation.CodeEnvironmentUnavailable)
		}
		return nil, nil, "", code, msg
	}
	return rargv, renv, "/", "", ""
}

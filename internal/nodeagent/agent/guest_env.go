package agent

import (
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

package agent

import (
	ctrl "sigs.k8s.io/controller-runtime"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/actionruns"
)

// setupActionRuns builds the ActionRun room over what it needs of the agent and registers
// its reconciler.
func (a *Agent) setupActionRuns(mgr ctrl.Manager) error {
	a.actionRuns = actionruns.New(actionruns.Deps{Ctx: a.runCtx, NodeName: a.cfg.NodeName, StateDir: a.cfg.StateDir,
		Client: a.client, Reader: a.reader, Store: a.store, Runner: a.runner, Blobs: a.blobs, Cgroups: a.cgroups,
		SandboxHelper: a.sandbox, SandboxErr: a.sandboxErr, Roots: a.mountedRoots, VerifyRoots: a.verifyRoots,
		Executor: a.executorOf, Limits: environmentLimits, Event: a.recordEvent})
	return a.actionRuns.Setup(mgr)
}

// actionClasses is what this node publishes in WorkbenchNode.status.actionClasses (the
// ActionRun room measures it; nil before the room is set up).
func (a *Agent) actionClasses() []wbv1.ActionClassSupport { return a.actionRuns.ActionClasses() }

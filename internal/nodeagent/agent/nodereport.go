package agent

import (
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"sensorium.dev/workbench/internal/nodeagent/environments"
	"sensorium.dev/workbench/internal/nodeagent/nodereport"
)

// Names of the node report room (internal/nodeagent/nodereport) kept where the agent's
// callers know them.
const (
	// ConditionDraining on a WorkbenchNode says the node is cordoned and the agent drained it.
	ConditionDraining = nodereport.ConditionDraining
	// ConditionProcessSandbox on host capabilities says whether the process sandbox works.
	ConditionProcessSandbox = nodereport.ConditionProcessSandbox
	// DefaultCapacityInterval bounds how often status.free is written.
	DefaultCapacityInterval = nodereport.DefaultCapacityInterval
)

// setupNodeReport builds the node report room over what it needs of the agent and
// registers its node (cordon) reconciler; Run starts its publication loops.
func (a *Agent) setupNodeReport(mgr ctrl.Manager) error {
	caps := a.cfg.Caps
	a.nodeReport = nodereport.New(nodereport.Deps{NodeName: a.cfg.NodeName, Version: Version, Client: a.client, Backends: a.backends,
		Caps: nodereport.Caps{Sessions: caps.Sessions, SessionsPerEnvironment: caps.SessionsPerEnvironment, ReaderTasks: caps.ReaderTasks,
			InputQueueDepth: caps.InputQueueDepth, EventBufferDepth: caps.EventBufferDepth, PendingWaits: caps.PendingWaits,
			ConcurrentCommands: caps.ConcurrentCommands},
		AdmittedRoots: a.cfg.AdmittedRoots, Heartbeat: time.Duration(a.cfg.HeartbeatSeconds) * time.Second,
		CapacityInterval: time.Duration(a.cfg.CapacityPublishMillis) * time.Millisecond,
		SandboxErr:       a.sandboxErr, Report: a.report,
		HostEnforcement: a.hostEnforcement, EnforcesDisk: environments.EnforcesDisk, // cgroups.go
		Storage: a.nodeStorage, StorageCondition: a.storageCondition, // storage.go
		ActionClasses: a.actionClasses, OpenSessions: a.sess.OpenCounts, Readers: a.sessions.Readers,
		RunningCommands: func() int { return a.runner.Running() + a.commands.GuestRunning() },
		EnvironmentRef:  a.envs.Ref, CordonChanged: a.wakeNodeBound}) // node_drain.go
	return a.nodeReport.Setup(mgr)
}

// kickCapacity asks the capacity loop to recount; it never blocks.
func (a *Agent) kickCapacity() { a.report.Kick() }

// Package nodereport is the node agent's report of its own node: the WorkbenchNode it
// registers and heartbeats (status, caps, conditions, storage, action classes), the
// BackendCapability objects of its backends, the free-capacity figures in
// WorkbenchNode status.free, and the node reconciler that follows the Node's cordon
// (kubectl drain). The agent wires it (agent/nodereport.go); everything the room counts
// but does not own reaches it through Deps.
package nodereport

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends"
)

// Caps are the node's bounds the report publishes and counts free capacity against.
type Caps struct {
	Sessions               int
	SessionsPerEnvironment int
	ReaderTasks            int
	InputQueueDepth        int
	EventBufferDepth       int
	PendingWaits           int
	ConcurrentCommands     int
}

// Deps is what the node report needs of the node agent.
type Deps struct {
	NodeName string
	// Version is the agent's version (published as agentVersion and in capabilities).
	Version  string
	Client   client.Client
	Backends *backends.Registry
	Caps     Caps
	// AdmittedRoots are the configuration's admitted roots, name to path.
	AdmittedRoots map[string]string
	// Heartbeat is the WorkbenchNode publication period.
	Heartbeat time.Duration
	// CapacityInterval bounds how often status.free is written (0: DefaultCapacityInterval).
	CapacityInterval time.Duration
	// SandboxErr is why the process sandbox cannot be established on this node (nil: it can).
	SandboxErr error
	// Report is the state other components write (recovery, waits, data plane, cordon).
	Report *Report

	// HostEnforcement is resourceEnforcement of the host backends' capabilities.
	HostEnforcement func() []string
	// EnforcesDisk says whether a backend gives each environment a disk of its own.
	EnforcesDisk func(b backends.Backend) bool
	// Storage and StorageCondition are the WorkbenchNode's storage report and its
	// StorageIsolated condition.
	Storage          func() *wbv1.NodeStorage
	StorageCondition func() metav1.Condition
	// ActionClasses is status.actionClasses (nil before the ActionRun room is set up).
	ActionClasses func() []wbv1.ActionClassSupport
	// OpenSessions counts the open sessions, in all and per environment UID.
	OpenSessions func() (open int, perEnv map[string]int)
	// Readers counts the reader tasks in use.
	Readers func() int
	// RunningCommands counts the commands running or reserved, host and guest.
	RunningCommands func() int
	// EnvironmentRef is "namespace/name" of an environment this process holds ("" if none).
	EnvironmentRef func(uid string) string
	// CordonChanged re-queues what the node holds after the cordon changed.
	CordonChanged func(ctx context.Context)
}

// Room publishes the node's report.
type Room struct{ d Deps }

// New builds the room over its dependencies.
func New(d Deps) *Room { return &Room{d: d} }

// Setup registers the node reconciler (the cordon watch, drain.go). The publication loops
// run as the caller starts them (PublishLoop, CapacityLoop).
func (r *Room) Setup(mgr ctrl.Manager) error {
	if err := ctrl.NewControllerManagedBy(mgr).For(&corev1.Node{}).Named("node-node").
		Complete(&nodeReconciler{r: r}); err != nil {
		return fmt.Errorf("node controller: %w", err)
	}
	return nil
}

// PublishLoop publishes the node's WorkbenchNode on every heartbeat and, once it exists,
// its BackendCapability objects (once they are accepted), until ctx ends. A refused
// publication is retried on the next heartbeat: on a real cluster the node agent's pod may
// start before the manager's admission webhooks serve.
//
// The WorkbenchNode comes first: nothing can be placed on a node before its capabilities
// exist, so every node that holds something has a WorkbenchNode, and the manager's
// cleanup escape may read a missing one as a node that is gone. Publishing capabilities
// first let an environment be placed, allocated and deleted before its node's WorkbenchNode
// existed; the manager then released its finalizer without the node's report and the copy
// leaked (TestFinalizerHoldsUntilTheNodeCleansUp under load).
func (r *Room) PublishLoop(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	t := time.NewTicker(r.d.Heartbeat)
	defer t.Stop()
	capsPublished := false
	for {
		nodeErr := r.publishNode(ctx)
		if nodeErr != nil {
			log.Error(nodeErr, "Publishing WorkbenchNode")
		}
		if !capsPublished && nodeErr == nil {
			if err := r.publishCapabilities(ctx); err != nil {
				log.Error(err, "Publishing backend capabilities; retrying on the next heartbeat")
			} else {
				capsPublished = true
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

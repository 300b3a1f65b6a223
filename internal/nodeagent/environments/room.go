// The node agent's room for Environments: it allocates, pauses, drains and tears down the
// environments bound to this node through their backends, materializes their sourced roots,
// claims and pins their host directories, and adopts pool members for their claimers. It
// imports nothing of the agent: Deps is all it sees. What the agent's other parts read of
// the environments this process holds is the Registry.

package environments

import (
	"context"
	"fmt"
	"sync"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/artifacts"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/store"
)

// Deps is what the environment room needs of the node agent.
type Deps struct {
	// Ctx is the agent's run context (wakes give up when it ends).
	Ctx      context.Context
	NodeName string
	// StateDir is the agent's state directory (git sources fetch beneath it).
	StateDir string
	// Sources is the node's workspace-source policy (nil: the defaults).
	Sources *SourcesConfig
	// RootSharing is the node's policy for overlapping host directories (tenancy.go).
	RootSharing actuation.RootSharing
	Client      client.Client // the node's cache
	Reader      client.Reader // the API server, uncached
	Store       *store.DB
	Backends    *backends.Registry
	// Registry holds the environments allocated in this process (the room writes it).
	Registry *Registry
	// Blobs are the node's artifact blobs (archive sources).
	Blobs *artifacts.Store
	// Cordoned reports whether the node is cordoned (kubectl drain).
	Cordoned func() bool
	// Drain stops an environment's running commands and closes its sessions, waiting
	// (bounded) for the commands' outcomes to be recorded.
	Drain func(ctx context.Context, envUID string)
	// MarkDrained flags an environment's running commands as interrupted by a node drain.
	MarkDrained func(envUID string)
	// ExpireArtifacts ends the retention of an environment's artifacts (teardown Delete).
	ExpireArtifacts func(ctx context.Context, env *wbv1.Environment) error
	// Available wakes what waits for env to be mounted in this process.
	Available func(ctx context.Context, env *wbv1.Environment)
	// Kick says the node's free capacity may have changed.
	Kick  func()
	Event nodekit.EventFunc
	// Wake re-queues an environment (the node's cordon changed, host directories freed).
	Wake chan event.GenericEvent
}

// Room reconciles this node's Environments.
type Room struct {
	d Deps
	// materialized remembers each sourced root's last materialization (sources.go).
	materialized sync.Map
}

// New returns the environment room over d.
func New(d Deps) *Room { return &Room{d: d} }

// Workers bounds the Environments the node allocates or tears down at once.
const Workers = 4

// Setup registers the Environment reconciler, filtered to this node by the cache, woken by
// the room's channel and by pool members' claims (pool.go). Environments reconcile
// concurrently: a VM's boot (tens of seconds under TCG) must not hold back a host-local
// allocation on the same node; one key is never reconciled twice at once, and the backends
// count what is booting against their caps.
func (a *Room) Setup(mgr ctrl.Manager) error {
	opts := nodekit.RetryOptions()
	opts.MaxConcurrentReconciles = Workers
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.Environment{}).Named("node-environment").WithOptions(opts).
		WatchesRawSource(source.Channel(a.d.Wake, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(claimerOfMember)). // pool.go
		Complete(&reconciler{a: a}); err != nil {
		return fmt.Errorf("environment controller: %w", err)
	}
	return nil
}

package agent

import (
	"fmt"
	"time"

	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/environments"
	"sensorium.dev/workbench/internal/nodeagent/imagemanifests"
	"sensorium.dev/workbench/internal/nodeagent/sessions"
)

// setupControllers registers one reconciler per kind, each filtered to this node.
func (a *Agent) setupControllers(mgr ctrl.Manager) error {
	name := func(kind string) string { return "node-" + kind }
	if err := a.setupIndexes(a.runCtx, mgr); err != nil {
		return fmt.Errorf("indexing references: %w", err)
	}
	if err := environments.New(a.environmentDeps()).Setup(mgr); err != nil {
		return err
	}
	if err := a.setupNodeReport(mgr); err != nil { // nodereport.go
		return err
	}
	if err := sessions.Setup(mgr, a.sessionDeps(), a.sessionsOfEnvironment); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.TerminalCommand{}).Named(name("command")).WithOptions(commandOptions(a.cfg.Caps)).
		WatchesRawSource(source.Channel(a.wakeCommands, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.TerminalSession{}, handler.EnqueueRequestsFromMapFunc(a.commandsOfSession)).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(a.commandsOfEnvironment)).
		Complete(a.setupCommands()); err != nil {
		return fmt.Errorf("command controller: %w", err)
	}
	if err := a.setupActionRuns(mgr); err != nil {
		return err
	}
	if err := imagemanifests.Setup(mgr, imagemanifests.Deps{NodeName: a.cfg.NodeName, Backends: a.backends, Client: a.client}); err != nil {
		return err
	}
	if err := a.setupViews(mgr); err != nil {
		return err
	}
	return a.setupOperations(mgr)
}

// maxRetryDelay bounds the backoff of a failed pass of the environment, session and command
// controllers: when the manager's webhooks are away (its pod evicted by kubectl drain,
// restarted), the outcomes the node holds reach the API within this long of their return,
// not after the default exponential backoff's quarter of an hour.
const maxRetryDelay = 15 * time.Second

// maxCommandWorkers bounds the node's command workers: each pass mostly waits on the API
// server and the store's fsync, so a few workers keep a 2-CPU node's start path busy.
const maxCommandWorkers = 16

// commandOptions runs the node's command passes concurrently: one worker per concurrent
// command the node allows, bounded by maxCommandWorkers. The worker count only bounds how
// many passes decide at once; what runs is bounded by the node's caps, which refuse at the
// cap with command-cap-reached (procexec's runner for host processes, startGuest for guest
// ones). controller-runtime never reconciles one key on two workers at once, and commands
// of one session run concurrently today (their output interleaves in the session's ring),
// so no per-session order is lost.
func commandOptions(caps Caps) controller.Options {
	o := retryOptions()
	o.MaxConcurrentReconciles = min(max(caps.ConcurrentCommands, 1), maxCommandWorkers)
	return o
}

func retryOptions() controller.Options {
	return controller.Options{RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay)}
}

func (a *Agent) recordEvent(obj client.Object, evType, reason, note string) {
	if a.recorder != nil {
		a.recorder.Eventf(obj, nil, evType, reason, "NodeAgent", "%s", note)
	}
}

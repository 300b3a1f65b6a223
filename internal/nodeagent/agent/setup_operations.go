package agent

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/probes"
	"sensorium.dev/workbench/internal/nodeagent/waits"
)

// setupOperations registers the wait, probe, file patch and artifact reconcilers, each
// filtered to this node by the cache, and closes the file watcher when the agent stops.
func (a *Agent) setupOperations(mgr ctrl.Manager) error {
	// signal turns informer events of a kind into a change signal for the pending waits
	// observing it; it enqueues nothing.
	signal := func(bs ...*waits.Broadcaster) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			for _, b := range bs {
				b.Broadcast()
			}
			return nil
		})
	}
	s := &a.signals
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.Wait{}).Named("node-wait").
		WatchesRawSource(source.Channel(a.wakeWaits, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.Wait{}, signal(&s.operation)).
		Watches(&wbv1.Environment{}, signal(&s.environment)).
		Watches(&wbv1.Artifact{}, signal(&s.artifact)).
		Watches(&wbv1.TerminalCommand{}, signal(&s.command, &s.operation)).
		Watches(&wbv1.Probe{}, signal(&s.operation)).
		Watches(&wbv1.FilePatch{}, signal(&s.operation)).
		Watches(&wbv1.TerminalCommand{}, handler.EnqueueRequestsFromMapFunc(a.operationsAwaitingScope)).
		Watches(&wbv1.TerminalSession{}, handler.EnqueueRequestsFromMapFunc(a.operationsAwaitingScope)).
		Complete(&waitReconciler{a: a}); err != nil {
		return fmt.Errorf("wait controller: %w", err)
	}
	if err := probes.Setup(mgr, probes.Deps{NodeName: a.cfg.NodeName, Client: a.client, Engine: a.engine,
		Scope: a.scopeSource, Observe: a.recordObservation, Event: a.recordEvent}, a.wakeProbes, a.probesAwaitingScope); err != nil {
		return err
	}
	if err := a.rec.Setup(mgr); err != nil { // the recordings room
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.FilePatch{}).Named("node-filepatch").
		WatchesRawSource(source.Channel(a.wakePatches, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(a.patchesOfEnvironment)).
		Watches(&wbv1.Artifact{}, handler.EnqueueRequestsFromMapFunc(a.patchesOfNamespace)).
		Complete(&patchReconciler{a: a}); err != nil {
		return fmt.Errorf("file patch controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.Artifact{}).Named("node-artifact").
		WatchesRawSource(source.Channel(a.wakeArtifacts, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(a.artifactsOfEnvironment)).
		Watches(&wbv1.TerminalSession{}, handler.EnqueueRequestsFromMapFunc(a.artifactsOfSession)).
		Complete(&artifactReconciler{a: a}); err != nil {
		return fmt.Errorf("artifact controller: %w", err)
	}
	return mgr.Add(managerRunnable(func(ctx context.Context) error {
		<-ctx.Done()
		a.mu.Lock()
		w := a.watcher
		a.mu.Unlock()
		if w != nil {
			_ = w.Close()
		}
		return nil
	}))
}

func probeIsFinal(s *wbv1.ProbeStatus) bool { return probes.IsFinal(s) }

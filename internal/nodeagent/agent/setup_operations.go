package agent

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/artifactcapture"
	"sensorium.dev/workbench/internal/nodeagent/filepatches"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/probes"
	"sensorium.dev/workbench/internal/nodeagent/waits"
)

// setupOperations registers the wait, probe, file patch and artifact reconcilers, each
// filtered to this node by the cache, and closes the file watcher when the agent stops.
func (a *Agent) setupOperations(mgr ctrl.Manager) error {
	if err := waits.New(waits.Deps{Ctx: a.runCtx, NodeName: a.cfg.NodeName, Client: a.client, Reader: a.reader, Store: a.store,
		Engine: a.engine, Signals: &a.signals, Scope: a.scopeSource, Observe: a.recordObservation,
		Pending: a.report.SetWaits, Kick: a.kickCapacity, Event: a.recordEvent, Wake: a.wakeWaits}).Setup(mgr); err != nil {
		return err
	}
	if err := probes.Setup(mgr, probes.Deps{NodeName: a.cfg.NodeName, Client: a.client, Engine: a.engine,
		Scope: a.scopeSource, Observe: a.recordObservation, Event: a.recordEvent}, a.wakeProbes, a.probesAwaitingScope); err != nil {
		return err
	}
	if err := a.rec.Setup(mgr); err != nil { // the recordings room
		return err
	}
	if err := filepatches.Setup(mgr, filepatches.Deps{NodeName: a.cfg.NodeName, Client: a.client, Reader: a.reader,
		Store: a.store, Blobs: a.blobs, Scoped: a.getScoped, Root: a.patchRoot, Recorder: a.rec, Event: a.recordEvent, GuestTimeout: patchTimeout},
		a.wakePatches, a.patchesOfEnvironment, a.patchesOfNamespace); err != nil {
		return err
	}
	if err := artifactcapture.Setup(mgr, artifactcapture.Deps{NodeName: a.cfg.NodeName, StateDir: a.cfg.StateDir, Client: a.client,
		Blobs: a.blobs, Scoped: a.getScoped, Root: a.patchRoot, SessionRing: a.sessionRing, Output: a.Output,
		KickSweep: a.kickArtifactSweep, Event: a.recordEvent}, a.wakeArtifacts, a.artifactsOfEnvironment, a.artifactsOfSession); err != nil {
		return err
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

func patchIsFinal(s *wbv1.FilePatchStatus) bool { return filepatches.IsFinal(s) }

// patchRoot opens a root of a mounted environment for the file patch and artifact rooms.
func (a *Agent) patchRoot(ctx context.Context, ns, envName, rootName string) (nodekit.Root, error) {
	return a.environmentRoot(ctx, ns, envName, rootName)
}

// Artifact retention and sources the agent's other parts share with the artifact room.
const (
	defaultRetention = artifactcapture.DefaultRetention
	artifactUpload   = artifactcapture.SourceUpload
)

func artifactOwned(s *wbv1.ArtifactStatus) wbv1.ArtifactStatus { return nodekit.ArtifactOwned(s) }

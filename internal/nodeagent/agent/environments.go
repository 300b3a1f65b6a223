package agent

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/environments"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// The environments room (internal/nodeagent/environments) owns Environments; this is the
// agent's wiring of it, what the room asks of the agent's other parts (draining an
// environment's commands and sessions, ending its artifacts), and the agent's reads of the
// environments this process holds (its registry).

// environmentDeps is what the environment room sees of the agent.
func (a *Agent) environmentDeps() environments.Deps {
	return environments.Deps{Ctx: a.runCtx, NodeName: a.cfg.NodeName, StateDir: a.cfg.StateDir, Sources: a.cfg.Sources,
		RootSharing: a.cfg.RootSharing, Client: a.client, Reader: a.reader, Store: a.store, Backends: a.backends,
		Registry: a.envs, Blobs: a.blobs, Cordoned: a.report.Cordoned,
		Drain: a.drainEnvironment, MarkDrained: a.markDrained, // node_drain.go
		ExpireArtifacts: a.expireArtifactsOf, Available: a.environmentAvailable, // watches.go
		Kick: a.kickCapacity, Event: a.recordEvent, Wake: a.wakeEnvironments}
}

// mountedRoots returns the environment's roots if it is ready in this process.
func (a *Agent) mountedRoots(envUID string) ([]backends.MountedRoot, bool) {
	return a.envs.Mounted(envUID)
}

// verifyRoots checks, right before a process starts with them, that every host root of the
// environment still names its pinned directory.
func (a *Agent) verifyRoots(envUID string, roots []backends.MountedRoot) error {
	return a.envs.VerifyRoots(envUID, roots)
}

// pinnedRootOf returns the pinned root of an environment (owned by the registry: never close it).
func (a *Agent) pinnedRootOf(envUID, name string) (*fsaccess.Root, error) {
	return a.envs.PinnedRoot(envUID, name)
}

// pausedRefusal is the refusal of new work on an environment asked to pause.
func pausedRefusal(env *wbv1.Environment) (string, string) { return environments.PausedRefusal(env) }

func condTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// drainEnvironment stops the environment's running commands and closes its sessions, and
// waits (bounded by drainWait) for the commands' outcomes to be recorded.
func (a *Agent) drainEnvironment(ctx context.Context, envUID string) {
	stopped := a.stopCommands(func(lc *liveCommand) bool { return lc.EnvUID == envUID })
	for _, uid := range a.sess.OpenIn(envUID) {
		a.closeSession(ctx, uid, false)
	}
	t := time.NewTimer(drainWait)
	defer t.Stop()
	for _, lc := range stopped {
		if lc.Finished == nil {
			continue // a guest command: cancelling it ended its wait
		}
		select {
		case <-lc.Finished:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// drainWait bounds how long a drain waits for stopped commands to record their outcomes.
const drainWait = 10 * time.Second

// expireArtifactsOf ends the retention of the artifacts of an environment deleted with
// teardown Delete: their retainedUntil becomes now, and the artifact sweep removes the blobs.
func (a *Agent) expireArtifactsOf(ctx context.Context, env *wbv1.Environment) error {
	var list wbv1.ArtifactList
	if err := a.client.List(ctx, &list, client.InNamespace(env.Namespace)); err != nil {
		return fmt.Errorf("listing artifacts of environment %s/%s: %w", env.Namespace, env.Name, err)
	}
	now := metav1.Now()
	for i := range list.Items {
		art := &list.Items[i]
		if art.Spec.EnvironmentRef != wbv1.ObjectName(env.Name) || art.Status.Digest == "" ||
			(art.Status.RetainedUntil != nil && !art.Status.RetainedUntil.After(now.Time)) {
			continue
		}
		if err := a.expireArtifact(ctx, art, now, "the environment was deleted with teardown Delete"); err != nil {
			return err
		}
	}
	a.kickArtifactSweep()
	return nil
}

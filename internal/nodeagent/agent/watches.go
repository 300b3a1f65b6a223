package agent

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/waits"
)

// The agent waits by watching, not by polling. An object that cannot proceed until another
// one is ready in this process (a command until its session is open, a session, patch or
// artifact until its environment is mounted) returns without a requeue; it is woken when
// what it waits for becomes available — by the informer event of the referenced object
// (mapped through field indexes on the refs), and, for availability that lives only in
// this process (a mounted environment, an open session ring), by an explicit wake from the
// reconciler that made it available.

// Field indexes on references (the node's cache holds only this node's objects).
const (
	indexSessionRef     = "spec.sessionRef"
	indexEnvironmentRef = "spec.environmentRef"
)

func (a *Agent) setupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	fi := mgr.GetFieldIndexer()
	for _, ix := range []struct {
		obj client.Object
		key string
		fn  client.IndexerFunc
	}{
		{&wbv1.TerminalCommand{}, indexSessionRef, func(o client.Object) []string {
			return []string{string(o.(*wbv1.TerminalCommand).Spec.SessionRef)}
		}},
		{&wbv1.TerminalSession{}, indexEnvironmentRef, func(o client.Object) []string {
			return []string{string(o.(*wbv1.TerminalSession).Spec.EnvironmentRef)}
		}},
		{&wbv1.FilePatch{}, indexEnvironmentRef, func(o client.Object) []string {
			return []string{string(o.(*wbv1.FilePatch).Spec.EnvironmentRef)}
		}},
		{&wbv1.Artifact{}, indexEnvironmentRef, func(o client.Object) []string {
			return []string{string(o.(*wbv1.Artifact).Spec.EnvironmentRef)}
		}},
	} {
		if err := fi.IndexField(ctx, ix.obj, ix.key, ix.fn); err != nil {
			return err
		}
	}
	return nil
}

// sessionsOfEnvironment maps an Environment to its sessions.
func (a *Agent) sessionsOfEnvironment(ctx context.Context, o client.Object) []reconcile.Request {
	var list wbv1.TerminalSessionList
	if err := a.client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexEnvironmentRef: o.GetName()}); err != nil {
		return nil
	}
	return nodekit.RequestsOf(list.Items, func(s *wbv1.TerminalSession) bool { return !wbv1.SessionPhaseIsFinal(s.Status.Phase) })
}

// commandsOfSession maps a TerminalSession to its commands that have no outcome yet.
func (a *Agent) commandsOfSession(ctx context.Context, o client.Object) []reconcile.Request {
	var list wbv1.TerminalCommandList
	if err := a.client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexSessionRef: o.GetName()}); err != nil {
		return nil
	}
	return nodekit.RequestsOf(list.Items, func(c *wbv1.TerminalCommand) bool { return !wbv1.CommandIsFinal(c.Status.Conditions) })
}

// commandsOfEnvironment maps an Environment to the pending commands of its sessions.
func (a *Agent) commandsOfEnvironment(ctx context.Context, o client.Object) []reconcile.Request {
	var out []reconcile.Request
	for _, s := range a.sessionsOfEnvironment(ctx, o) {
		var sess wbv1.TerminalSession
		sess.Namespace, sess.Name = s.Namespace, s.Name
		out = append(out, a.commandsOfSession(ctx, &sess)...)
	}
	return out
}

// patchesOfEnvironment maps an Environment to its patches that have no outcome yet.
func (a *Agent) patchesOfEnvironment(ctx context.Context, o client.Object) []reconcile.Request {
	var list wbv1.FilePatchList
	if err := a.client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexEnvironmentRef: o.GetName()}); err != nil {
		return nil
	}
	return nodekit.RequestsOf(list.Items, func(p *wbv1.FilePatch) bool { return !patchIsFinal(&p.Status) })
}

// patchesOfNamespace maps an Artifact to the pending patches of its namespace (a patch may
// carry an artifact's bytes).
func (a *Agent) patchesOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list wbv1.FilePatchList
	if err := a.client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	return nodekit.RequestsOf(list.Items, func(p *wbv1.FilePatch) bool { return !patchIsFinal(&p.Status) })
}

// artifactsOfEnvironment maps an Environment to its artifacts not stored yet.
func (a *Agent) artifactsOfEnvironment(ctx context.Context, o client.Object) []reconcile.Request {
	var list wbv1.ArtifactList
	if err := a.client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexEnvironmentRef: o.GetName()}); err != nil {
		return nil
	}
	return nodekit.RequestsOf(list.Items, func(x *wbv1.Artifact) bool { return x.Status.Digest == "" && x.Status.Refusal == nil })
}

// artifactsOfSession maps a session to the artifacts of its environment not stored yet.
func (a *Agent) artifactsOfSession(ctx context.Context, o client.Object) []reconcile.Request {
	s, ok := o.(*wbv1.TerminalSession)
	if !ok {
		return nil
	}
	var env wbv1.Environment
	env.Namespace, env.Name = s.Namespace, string(s.Spec.EnvironmentRef)
	return a.artifactsOfEnvironment(ctx, &env)
}

// environmentAvailable wakes what waits for env to be mounted in this process: its
// sessions, their commands, its patches and artifacts, and every wait and probe (their
// sources resolve through the environment).
func (a *Agent) environmentAvailable(ctx context.Context, env *wbv1.Environment) {
	a.wakeAll(a.wakeSessions, a.sessionsOfEnvironment(ctx, env))
	a.wakeAll(a.wakeCommands, a.commandsOfEnvironment(ctx, env))
	a.wakeAll(a.wakePatches, a.patchesOfEnvironment(ctx, env))
	a.wakeAll(a.wakeArtifacts, a.artifactsOfEnvironment(ctx, env))
	a.wakeOperations(ctx, env.Namespace)
}

// sessionAvailable wakes what waits for a session's ring in this process.
func (a *Agent) sessionAvailable(ctx context.Context, ts *wbv1.TerminalSession) {
	a.wakeAll(a.wakeCommands, a.commandsOfSession(ctx, ts))
	a.wakeAll(a.wakeArtifacts, a.artifactsOfSession(ctx, ts))
	a.wakeOperations(ctx, ts.Namespace)
}

// wakeOperations wakes the pending waits and probes of a namespace whose scope may just
// have become available.
func (a *Agent) wakeOperations(ctx context.Context, ns string) {
	a.wakeAll(a.wakeWaits, waits.Pending(ctx, a.client, ns))
	var probes wbv1.ProbeList
	if err := a.client.List(ctx, &probes, client.InNamespace(ns)); err == nil {
		a.wakeAll(a.wakeProbes, nodekit.RequestsOf(probes.Items, func(p *wbv1.Probe) bool { return !probeIsFinal(&p.Status) }))
	}
	a.signals.Environment.Broadcast()
}

func (a *Agent) wakeAll(ch chan event.GenericEvent, reqs []reconcile.Request) {
	for _, r := range reqs {
		obj := &wbv1.TerminalCommand{} // the channel handler enqueues by key; any object type carries it
		obj.Namespace, obj.Name = r.Namespace, r.Name
		a.wake(ch, obj)
	}
}

// probesAwaitingScope maps a command or session event to the pending probes of its
// namespace.
func (a *Agent) probesAwaitingScope(ctx context.Context, o client.Object) []reconcile.Request {
	var list wbv1.ProbeList
	if err := a.client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	return nodekit.RequestsOf(list.Items, func(p *wbv1.Probe) bool { return !probeIsFinal(&p.Status) })
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/runs"
	"sensorium.dev/workbench/internal/nodeagent/waits"
)

// errNotYet: the scoped resource exists but is not ready in this process yet (an
// environment still allocating, a session not open yet); the caller requeues.
var errNotYet = nodekit.ErrNotYet

// commandFinished is called once a command's outcome is recorded (awaitCommand).
func (a *Agent) commandFinished() { a.signals.Command.Broadcast() }

// scopeSource maps a scope onto the source observing it. watch selects an inotify-woken
// file source (waits); probes evaluate once and need none. Errors: a refusal (the wait
// or probe ends with its code), errNotYet, or a transient API error.
func (a *Agent) scopeSource(ctx context.Context, ns string, s *wbv1.Scope, watch bool) (waits.Source, error) {
	switch {
	case s == nil:
		return nil, actuation.Refusef(actuation.CodeWaitScopeInvalid, "no scope")
	case s.SessionRef != nil:
		return a.sessionSource(ctx, types.NamespacedName{Namespace: ns, Name: string(*s.SessionRef)})
	case s.CommandRef != nil:
		return a.commandSource(ctx, types.NamespacedName{Namespace: ns, Name: string(*s.CommandRef)})
	case s.EnvironmentRef != nil:
		return waits.EnvironmentSource(a.client, &a.signals.Environment, types.NamespacedName{Namespace: ns, Name: string(*s.EnvironmentRef)}), nil
	case s.File != nil:
		ra, err := a.environmentRoot(ctx, ns, string(s.File.EnvironmentRef), string(s.File.Root))
		if err != nil {
			return nil, err
		}
		// A root with no change notifications refuses Watch (its refusal ends a file
		// wait); its probes read once through its file access.
		host, werr := ra.Files.Watch()
		switch {
		case werr != nil && watch:
			return nil, werr
		case werr != nil:
			return waits.FilesSource(ra.Files, string(s.File.Path)), nil
		case !watch:
			return waits.FileSource(host, string(s.File.Path), nil), nil
		}
		w, err := a.fileWatcher()
		if err != nil {
			return nil, err
		}
		return w.Source(host, string(s.File.Path))
	case s.ArtifactRef != nil:
		return waits.ArtifactSource(a.client, &a.signals.Artifact, types.NamespacedName{Namespace: ns, Name: string(*s.ArtifactRef)}), nil
	case s.OperationRef != nil:
		return waits.OperationSource(a.client, &a.signals.Operation, ns, *s.OperationRef)
	}
	return nil, actuation.Refusef(actuation.CodeWaitScopeInvalid, "the scope names nothing")
}

// getScoped reads an object a scope names from the node's cache. An object the cache has
// not seen yet while the API server has it (its node label, set by the manager, or the
// informer lags behind the object that names it) is errNotYet, not a refusal.
func (a *Agent) getScoped(ctx context.Context, key types.NamespacedName, obj client.Object) error {
	err := a.client.Get(ctx, key, obj)
	if !apierrors.IsNotFound(err) {
		return err
	}
	switch rerr := a.reader.Get(ctx, key, obj); {
	case rerr == nil:
		return errNotYet
	case !apierrors.IsNotFound(rerr):
		return rerr
	}
	return err
}

// readScoped is getScoped for a source: a missing object is the refusal missing, one the
// cache does not hold yet errNotYet, any other error names the kind and key read.
func (a *Agent) readScoped(ctx context.Context, kind string, key types.NamespacedName, obj client.Object, missing *actuation.Refusal) error {
	err := a.getScoped(ctx, key, obj)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return missing
	case errors.Is(err, errNotYet):
		return err
	}
	return fmt.Errorf("reading %s %s: %w", kind, key, err)
}

// fileWatcher returns the agent's inotify watcher, opening it on first use. When the
// kernel refuses one, file waits refuse watch-unavailable: there is no polling fallback.
func (a *Agent) fileWatcher() (*waits.FileWatcher, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.watcher == nil {
		w, err := waits.NewFileWatcher(waits.WatchCaps{})
		if err != nil {
			return nil, err
		}
		a.watcher = w
	}
	return a.watcher, nil
}

// environmentRoot opens the named root of an environment that is ready in this process,
// through its backend's file access (openRoot).
func (a *Agent) environmentRoot(ctx context.Context, ns, envName, rootName string) (nodekit.Root, error) {
	var env wbv1.Environment
	key := types.NamespacedName{Namespace: ns, Name: envName}
	if err := a.readScoped(ctx, "Environment", key, &env, actuation.Refusef(actuation.CodeEnvironmentUnavailable, "environment %s does not exist", key)); err != nil {
		return nodekit.Root{}, err
	}
	if env.Status.NodeName != a.cfg.NodeName {
		return nodekit.Root{}, errNotYet
	}
	roots, ready := a.mountedRoots(string(env.UID))
	if !ready {
		switch env.Status.Phase {
		case wbv1.EnvironmentFailed, wbv1.EnvironmentExpired, wbv1.EnvironmentClosed, wbv1.EnvironmentDraining:
			return nodekit.Root{}, actuation.Refusef(actuation.CodeEnvironmentUnavailable, "environment %s/%s is %s", ns, envName, env.Status.Phase)
		}
		return nodekit.Root{}, errNotYet
	}
	for _, mr := range roots {
		if mr.Name == rootName {
			files, err := a.openRoot(&env, mr)
			if err != nil {
				return nodekit.Root{Mount: mr}, fmt.Errorf("opening root %s of environment %s/%s: %w", rootName, ns, envName, err)
			}
			return nodekit.Root{Mount: mr, Files: files}, nil
		}
	}
	return nodekit.Root{}, actuation.Refusef(actuation.CodeRootNotAllowed, "%s is not a root of environment %s/%s", rootName, ns, envName)
}

// sessionSource observes an open session: its PTY program (screen and ring) through the
// engine's session source, or the event ring of a structured session.
func (a *Agent) sessionSource(ctx context.Context, key types.NamespacedName) (waits.Source, error) {
	var ts wbv1.TerminalSession
	if err := a.readScoped(ctx, "TerminalSession", key, &ts, actuation.Refusef(actuation.CodeSessionMissing, "session %s does not exist", key)); err != nil {
		return nil, err
	}
	if isFinalSessionPhase(string(ts.Status.Phase)) {
		return nil, actuation.Refusef(actuation.CodeSessionClosed, "session %s is %s", key, ts.Status.Phase)
	}
	uid := string(ts.UID)
	live, closed := a.sess.Get(uid)
	switch {
	case live == nil:
		return nil, errNotYet
	case closed:
		return nil, actuation.Refusef(actuation.CodeSessionClosed, "session %s is closed", key)
	case live.PTY != nil:
		return waits.SessionSource(live.PTY), nil
	}
	return waits.RingSource(live.Ring, live.Started, func() bool {
		s, closed := a.sess.Get(uid)
		return s == nil || closed
	}), nil
}

// commandSource is satisfied once the command has its one recorded outcome, in this
// process (the fast path, woken by commandFinished) or in its status.
func (a *Agent) commandSource(ctx context.Context, key types.NamespacedName) (waits.Source, error) {
	var cmd wbv1.TerminalCommand
	if err := a.readScoped(ctx, "TerminalCommand", key, &cmd, actuation.Refusef(actuation.CodeWaitScopeInvalid, "command %s does not exist", key)); err != nil {
		return nil, err
	}
	uid := string(cmd.UID)
	return waits.FuncSource(a.signals.Command.Changed, func(*waits.Request) (waits.Observation, error) {
		return a.observeCommand(uid, key), nil
	}), nil
}

func (a *Agent) observeCommand(uid string, key types.NamespacedName) waits.Observation {
	now := time.Now()
	_, o, _ := a.commands.Get(uid)
	if o == nil {
		if rec, ok, err := a.store.Commands().Get(uid); err == nil && ok {
			o = runs.Decode[commandOutcome](rec.Outcome)
		}
	}
	if o != nil {
		return waits.Observation{Satisfied: true, SeqFrom: o.SeqFrom, SeqTo: o.SeqTo, Digest: o.OutputDigest,
			Detail: "command " + string(o.Phase), ObservedAt: now}
	}
	var cmd wbv1.TerminalCommand
	if err := a.client.Get(context.Background(), key, &cmd); err == nil && string(cmd.UID) == uid && wbv1.CommandIsFinal(cmd.Status.Conditions) {
		return waits.Observation{Satisfied: true, SeqFrom: uint64(cmd.Status.SeqFrom), SeqTo: uint64(cmd.Status.SeqTo),
			Digest: string(cmd.Status.OutputDigest), Detail: "command " + string(cmd.Status.Phase), ObservedAt: now}
	}
	return waits.Observation{Detail: "command has not finished", ObservedAt: now}
}

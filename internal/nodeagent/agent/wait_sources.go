package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/waits"
)

// errNotYet: the scoped resource exists but is not ready in this process yet (an
// environment still allocating, a session not open yet); the caller requeues.
var errNotYet = nodekit.ErrNotYet

// waitSignals are the change signals of the conditions the agent feeds from its
// reconcilers and informers (terminal.command.done, environment.ready,
// artifact.present, operation.done). Each wakes the pending waits of its kind to
// observe again; nothing polls.
type waitSignals struct {
	command, environment, artifact, operation waits.Broadcaster
}

// commandFinished is called once a command's outcome is recorded (awaitCommand).
func (a *Agent) commandFinished() { a.signals.command.Broadcast() }

// conditionRequest maps a Wait/Probe condition onto an engine request without its
// source and deadline.
func conditionRequest(id string, c *wbv1.WaitCondition) (waits.Request, error) {
	return nodekit.ConditionRequest(id, c)
}

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
		return a.environmentSource(types.NamespacedName{Namespace: ns, Name: string(*s.EnvironmentRef)}), nil
	case s.File != nil:
		ra, err := a.environmentRoot(ctx, ns, string(s.File.EnvironmentRef), string(s.File.Root))
		switch {
		case err != nil:
			return nil, err
		case ra.guest != nil && watch:
			return nil, errGuestFileWaits
		case ra.guest != nil:
			return &guestFileSource{root: ra.guest, rel: string(s.File.Path)}, nil
		case !watch:
			return waits.FileSource(ra.host, string(s.File.Path), nil), nil
		}
		w, err := a.fileWatcher()
		if err != nil {
			return nil, err
		}
		return w.Source(ra.host, string(s.File.Path))
	case s.ArtifactRef != nil:
		return a.artifactSource(types.NamespacedName{Namespace: ns, Name: string(*s.ArtifactRef)}), nil
	case s.OperationRef != nil:
		return a.operationSource(ns, *s.OperationRef)
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

// environmentRoot opens the named root of an environment that is ready in this process:
// its host directory, or its directory inside the environment's VM guest.
func (a *Agent) environmentRoot(ctx context.Context, ns, envName, rootName string) (rootAccess, error) {
	var env wbv1.Environment
	if err := a.getScoped(ctx, types.NamespacedName{Namespace: ns, Name: envName}, &env); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return rootAccess{}, actuation.Refusef(actuation.CodeEnvironmentUnavailable, "environment %s/%s does not exist", ns, envName)
		case errors.Is(err, errNotYet):
			return rootAccess{}, err
		}
		return rootAccess{}, fmt.Errorf("reading Environment %s/%s: %w", ns, envName, err)
	}
	if env.Status.NodeName != a.cfg.NodeName {
		return rootAccess{}, errNotYet
	}
	roots, ready := a.mountedRoots(string(env.UID))
	if !ready {
		switch env.Status.Phase {
		case wbv1.EnvironmentFailed, wbv1.EnvironmentExpired, wbv1.EnvironmentClosed, wbv1.EnvironmentDraining:
			return rootAccess{}, actuation.Refusef(actuation.CodeEnvironmentUnavailable, "environment %s/%s is %s", ns, envName, env.Status.Phase)
		}
		return rootAccess{}, errNotYet
	}
	for _, mr := range roots {
		if mr.Name == rootName {
			ra, err := a.openRootAccess(&env, mr)
			if err != nil {
				return ra, fmt.Errorf("opening root %s of environment %s/%s: %w", rootName, ns, envName, err)
			}
			return ra, nil
		}
	}
	return rootAccess{}, actuation.Refusef(actuation.CodeRootNotAllowed, "%s is not a root of environment %s/%s", rootName, ns, envName)
}

// sessionSource observes an open session: its PTY program (screen and ring) through the
// engine's session source, or the event ring of a structured session.
func (a *Agent) sessionSource(ctx context.Context, key types.NamespacedName) (waits.Source, error) {
	var ts wbv1.TerminalSession
	if err := a.getScoped(ctx, key, &ts); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, actuation.Refusef(actuation.CodeSessionMissing, "session %s does not exist", key)
		case errors.Is(err, errNotYet):
			return nil, err
		}
		return nil, fmt.Errorf("reading TerminalSession %s: %w", key, err)
	}
	if isFinalSessionPhase(string(ts.Status.Phase)) {
		return nil, actuation.Refusef(actuation.CodeSessionClosed, "session %s is %s", key, ts.Status.Phase)
	}
	uid := string(ts.UID)
	live, closed := a.sess.get(uid)
	switch {
	case live == nil:
		return nil, errNotYet
	case closed:
		return nil, actuation.Refusef(actuation.CodeSessionClosed, "session %s is closed", key)
	case live.pty != nil:
		return waits.SessionSource(live.pty), nil
	}
	return &ringSource{a: a, uid: uid, rg: live.ring, started: live.started}, nil
}

// commandSource is satisfied once the command has its one recorded outcome, in this
// process (the fast path, woken by commandFinished) or in its status.
func (a *Agent) commandSource(ctx context.Context, key types.NamespacedName) (waits.Source, error) {
	var cmd wbv1.TerminalCommand
	if err := a.getScoped(ctx, key, &cmd); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, actuation.Refusef(actuation.CodeWaitScopeInvalid, "command %s does not exist", key)
		case errors.Is(err, errNotYet):
			return nil, err
		}
		return nil, fmt.Errorf("reading TerminalCommand %s: %w", key, err)
	}
	uid := string(cmd.UID)
	return waits.FuncSource(a.signals.command.Changed, func(*waits.Request) (waits.Observation, error) {
		return a.observeCommand(uid, key), nil
	}), nil
}

func (a *Agent) observeCommand(uid string, key types.NamespacedName) waits.Observation {
	now := time.Now()
	_, o, _ := a.commands.get(uid)
	if o == nil {
		if rec, ok, err := a.store.Commands().Get(uid); err == nil && ok {
			o = decodeOutcome[commandOutcome](rec.Outcome)
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

// environmentSource is satisfied while the environment's Ready condition holds; an
// environment that failed, expired or closed ends the wait with environment-unavailable.
func (a *Agent) environmentSource(key types.NamespacedName) waits.Source {
	return waits.FuncSource(a.signals.environment.Changed, func(*waits.Request) (waits.Observation, error) {
		var env wbv1.Environment
		if err := a.client.Get(context.Background(), key, &env); err != nil {
			if apierrors.IsNotFound(err) { // not (yet) bound to this node: the deadline bounds the wait
				return waits.Observation{Detail: "environment is not on this node", ObservedAt: time.Now()}, nil
			}
			return waits.Observation{}, fmt.Errorf("reading Environment %s: %w", key, err)
		}
		switch env.Status.Phase {
		case wbv1.EnvironmentFailed, wbv1.EnvironmentExpired, wbv1.EnvironmentClosed:
			return waits.Observation{}, actuation.Refusef(actuation.CodeEnvironmentUnavailable, "environment %s is %s", key, env.Status.Phase)
		}
		return waits.Observation{Satisfied: condTrue(env.Status.Conditions, wbv1.ConditionReady),
			Detail: "environment is " + string(env.Status.Phase), ObservedAt: time.Now()}, nil
	})
}

// artifactSource is satisfied once the artifact records its digest.
func (a *Agent) artifactSource(key types.NamespacedName) waits.Source {
	return waits.FuncSource(a.signals.artifact.Changed, func(*waits.Request) (waits.Observation, error) {
		var art wbv1.Artifact
		if err := a.client.Get(context.Background(), key, &art); err != nil {
			if apierrors.IsNotFound(err) {
				return waits.Observation{Detail: "artifact does not exist", ObservedAt: time.Now()}, nil
			}
			return waits.Observation{}, fmt.Errorf("reading Artifact %s: %w", key, err)
		}
		if r := art.Status.Refusal; r != nil {
			return waits.Observation{}, actuation.Refusef(actuation.Code(r.Code), "artifact %s was refused: %s", key, r.Message)
		}
		if art.Status.Digest == "" {
			return waits.Observation{Detail: "artifact not stored yet", ObservedAt: time.Now()}, nil
		}
		return waits.Observation{Satisfied: true, Digest: string(art.Status.Digest), Detail: "artifact present", ObservedAt: time.Now()}, nil
	})
}

// operationSource is satisfied once the named Wait, Probe, FilePatch or TerminalCommand
// has its final outcome (whatever it is).
func (a *Agent) operationSource(ns, ref string) (waits.Source, error) {
	kind, name, ok := strings.Cut(ref, "/")
	if !ok || name == "" {
		return nil, actuation.Refusef(actuation.CodeWaitScopeInvalid, "operationRef %q must be Kind/name", ref)
	}
	var obj client.Object
	var done func() (bool, string)
	switch kind {
	case "Wait":
		o := &wbv1.Wait{}
		obj, done = o, func() (bool, string) { return waitIsFinal(&o.Status), string(o.Status.ConditionStatus) }
	case "Probe":
		o := &wbv1.Probe{}
		obj, done = o, func() (bool, string) { return probeIsFinal(&o.Status), string(o.Status.Result) }
	case "FilePatch":
		o := &wbv1.FilePatch{}
		obj, done = o, func() (bool, string) { return patchIsFinal(&o.Status), string(o.Status.Phase) }
	case "TerminalCommand":
		o := &wbv1.TerminalCommand{}
		obj, done = o, func() (bool, string) { return wbv1.CommandIsFinal(o.Status.Conditions), string(o.Status.Phase) }
	default:
		return nil, actuation.Refusef(actuation.CodeWaitScopeInvalid, "operationRef kind %q is not Wait, Probe, FilePatch or TerminalCommand", kind)
	}
	key := types.NamespacedName{Namespace: ns, Name: name}
	return waits.FuncSource(a.signals.operation.Changed, func(*waits.Request) (waits.Observation, error) {
		if err := a.client.Get(context.Background(), key, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return waits.Observation{Detail: kind + " does not exist", ObservedAt: time.Now()}, nil
			}
			return waits.Observation{}, fmt.Errorf("reading %s %s: %w", kind, key, err)
		}
		ok, state := done()
		return waits.Observation{Satisfied: ok, Detail: kind + " is " + state, ObservedAt: time.Now()}, nil
	}), nil
}

// ringSource observes the event ring of a session without a PTY program (the output of
// its structured commands): output since a cursor, output matching a pattern, and
// quiescence. Such a session has no process of its own, so terminal.process.alive and
// terminal.no-progress do not apply (wait-scope-invalid). Each evaluation scans the
// newest waits.ScanEvents events and at most waits.ScanBytes of their output.
type ringSource struct {
	a       *Agent
	uid     string
	rg      *ring.Ring
	started time.Time
}

func (r *ringSource) Supports(kind string) bool {
	switch kind {
	case waits.KindOutputSince, waits.KindOutputMatches, waits.KindQuiescent:
		return true
	}
	return false
}

// Changed fires on the next ring event; nil once the ring or the session is closed (no
// further change can come, and a closed ring's channel is always ready).
func (r *ringSource) Changed() <-chan struct{} {
	if r.closed() || r.rg.Stats().Closed {
		return nil
	}
	return r.rg.Notify()
}

func (r *ringSource) closed() bool {
	s, closed := r.a.sess.get(r.uid)
	return s == nil || closed
}

func (r *ringSource) Observe(req *waits.Request) (waits.Observation, error) {
	ended := r.closed() // before reading: once closed, the ring holds everything
	now := time.Now()
	last := r.rg.LastSeq()
	cursor := req.SinceSeq
	if last > waits.ScanEvents && cursor < last-waits.ScanEvents {
		cursor = last - waits.ScanEvents
	}
	evs, _, _ := r.rg.Read(cursor, waits.ScanEvents)
	obs := waits.Observation{ObservedAt: now}
	var text []byte
	lastOut := r.started
	for _, e := range evs {
		if e.Kind != ring.KindOutput || e.Seq <= req.SinceSeq {
			continue
		}
		if obs.SeqFrom == 0 {
			obs.SeqFrom = e.Seq
		}
		obs.SeqTo, lastOut = e.Seq, e.Time
		if req.Kind == waits.KindOutputMatches {
			text = append(text, e.Data...)
			if len(text) > waits.ScanBytes {
				text = text[len(text)-waits.ScanBytes:]
			}
		}
	}
	switch req.Kind {
	case waits.KindOutputSince:
		obs.Satisfied = obs.SeqFrom != 0
		obs.Detail = "no output after the cursor"
		if obs.Satisfied {
			obs.Detail = "output after the cursor"
		}
	case waits.KindOutputMatches:
		obs.Satisfied = req.Pattern.MatchString(waits.StripANSI(text))
		obs.Detail = "no match yet"
		if obs.Satisfied {
			obs.Detail = "pattern matched in the output"
		}
	case waits.KindQuiescent:
		quiet := now.Sub(lastOut)
		obs.Satisfied = quiet >= req.Quiet
		obs.Detail = "output within the quiet window"
		if obs.Satisfied {
			obs.Detail = "no output for the quiet window"
			obs.Diagnostics = []waits.Diagnostic{waits.DiagQuiescent}
		} else {
			obs.RecheckAfter = req.Quiet - quiet
		}
	}
	if !obs.Satisfied && ended && req.Kind != waits.KindQuiescent {
		obs.Final, obs.Detail = true, "session closed: "+obs.Detail
	}
	return obs, nil
}

package waits

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/ring"
)

// The sources of the scopes the room observes through the node's cache: an environment's
// readiness, an artifact's digest, an operation's outcome, a structured session's ring.

// EnvironmentSource is satisfied while the environment's Ready condition holds; an
// environment that failed, expired or closed ends the wait with environment-unavailable.
func EnvironmentSource(c client.Reader, changed *Broadcaster, key types.NamespacedName) Source {
	return FuncSource(changed.Changed, func(*Request) (Observation, error) {
		var env wbv1.Environment
		if err := c.Get(context.Background(), key, &env); err != nil {
			if apierrors.IsNotFound(err) { // not (yet) bound to this node: the deadline bounds the wait
				return Observation{Detail: "environment is not on this node", ObservedAt: time.Now()}, nil
			}
			return Observation{}, fmt.Errorf("reading Environment %s: %w", key, err)
		}
		switch env.Status.Phase {
		case wbv1.EnvironmentFailed, wbv1.EnvironmentExpired, wbv1.EnvironmentClosed:
			return Observation{}, actuation.Refusef(actuation.CodeEnvironmentUnavailable, "environment %s is %s", key, env.Status.Phase)
		}
		return Observation{Satisfied: apimeta.IsStatusConditionTrue(env.Status.Conditions, wbv1.ConditionReady),
			Detail: "environment is " + string(env.Status.Phase), ObservedAt: time.Now()}, nil
	})
}

// ArtifactSource is satisfied once the artifact records its digest.
func ArtifactSource(c client.Reader, changed *Broadcaster, key types.NamespacedName) Source {
	return FuncSource(changed.Changed, func(*Request) (Observation, error) {
		var art wbv1.Artifact
		if err := c.Get(context.Background(), key, &art); err != nil {
			if apierrors.IsNotFound(err) {
				return Observation{Detail: "artifact does not exist", ObservedAt: time.Now()}, nil
			}
			return Observation{}, fmt.Errorf("reading Artifact %s: %w", key, err)
		}
		if r := art.Status.Refusal; r != nil {
			return Observation{}, actuation.Refusef(actuation.Code(r.Code), "artifact %s was refused: %s", key, r.Message)
		}
		if art.Status.Digest == "" {
			return Observation{Detail: "artifact not stored yet", ObservedAt: time.Now()}, nil
		}
		return Observation{Satisfied: true, Digest: string(art.Status.Digest), Detail: "artifact present", ObservedAt: time.Now()}, nil
	})
}

// OperationSource is satisfied once the named Wait, Probe, FilePatch or TerminalCommand
// has its final outcome (whatever it is).
func OperationSource(c client.Reader, changed *Broadcaster, ns, ref string) (Source, error) {
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
		obj, done = o, func() (bool, string) { return wbv1.ProbeIsFinal(o.Status.Result), string(o.Status.Result) }
	case "FilePatch":
		o := &wbv1.FilePatch{}
		obj, done = o, func() (bool, string) { return wbv1.FilePatchIsFinal(o.Status.Phase), string(o.Status.Phase) }
	case "TerminalCommand":
		o := &wbv1.TerminalCommand{}
		obj, done = o, func() (bool, string) { return wbv1.CommandIsFinal(o.Status.Conditions), string(o.Status.Phase) }
	default:
		return nil, actuation.Refusef(actuation.CodeWaitScopeInvalid, "operationRef kind %q is not Wait, Probe, FilePatch or TerminalCommand", kind)
	}
	key := types.NamespacedName{Namespace: ns, Name: name}
	return FuncSource(changed.Changed, func(*Request) (Observation, error) {
		if err := c.Get(context.Background(), key, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return Observation{Detail: kind + " does not exist", ObservedAt: time.Now()}, nil
			}
			return Observation{}, fmt.Errorf("reading %s %s: %w", kind, key, err)
		}
		ok, state := done()
		return Observation{Satisfied: ok, Detail: kind + " is " + state, ObservedAt: time.Now()}, nil
	}), nil
}

// RingSource observes the event ring of a session without a PTY program (the output of
// its structured commands): output since a cursor, output matching a pattern, and
// quiescence. Such a session has no process of its own, so terminal.process.alive and
// terminal.no-progress do not apply (wait-scope-invalid). Each evaluation scans the
// newest ScanEvents events and at most ScanBytes of their output.
// ended says whether the session is closed (or no longer served by this process).
func RingSource(rg *ring.Ring, started time.Time, ended func() bool) Source {
	return &ringSource{rg: rg, started: started, ended: ended}
}

type ringSource struct {
	rg      *ring.Ring
	started time.Time
	ended   func() bool
}

func (r *ringSource) Supports(kind string) bool {
	switch kind {
	case KindOutputSince, KindOutputMatches, KindQuiescent:
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

func (r *ringSource) closed() bool { return r.ended() }

func (r *ringSource) Observe(req *Request) (Observation, error) {
	ended := r.closed() // before reading: once closed, the ring holds everything
	now := time.Now()
	last := r.rg.LastSeq()
	cursor := req.SinceSeq
	if last > ScanEvents && cursor < last-ScanEvents {
		cursor = last - ScanEvents
	}
	evs, _, _ := r.rg.Read(cursor, ScanEvents)
	obs := Observation{ObservedAt: now}
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
		if req.Kind == KindOutputMatches {
			text = append(text, e.Data...)
			if len(text) > ScanBytes {
				text = text[len(text)-ScanBytes:]
			}
		}
	}
	switch req.Kind {
	case KindOutputSince:
		obs.Satisfied = obs.SeqFrom != 0
		obs.Detail = "no output after the cursor"
		if obs.Satisfied {
			obs.Detail = "output after the cursor"
		}
	case KindOutputMatches:
		obs.Satisfied = req.Pattern.MatchString(StripANSI(text))
		obs.Detail = "no match yet"
		if obs.Satisfied {
			obs.Detail = "pattern matched in the output"
		}
	case KindQuiescent:
		quiet := now.Sub(lastOut)
		obs.Satisfied = quiet >= req.Quiet
		obs.Detail = "output within the quiet window"
		if obs.Satisfied {
			obs.Detail = "no output for the quiet window"
			obs.Diagnostics = []Diagnostic{DiagQuiescent}
		} else {
			obs.RecheckAfter = req.Quiet - quiet
		}
	}
	if !obs.Satisfied && ended && req.Kind != KindQuiescent {
		obs.Final, obs.Detail = true, "session closed: "+obs.Detail
	}
	return obs, nil
}

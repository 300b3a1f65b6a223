// Package probes is the node agent's room for Probes: it evaluates a probe once, within
// its timeout, against the source its scope names, and records the result.
package probes

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/waits"
	"sensorium.dev/workbench/internal/skills"
	"sensorium.dev/workbench/internal/statusapply"
)

// probeScopeGrace is how long a probe waits for its scoped resource to become available
// in this process (an environment still allocating, a session still opening) before it
// ends Error with environment-unavailable.
const probeScopeGrace = 30 * time.Second

// Probe results (api/v1alpha1 holds the one derivation).
const (
	probePending = wbv1.ProbePending
	probePass    = wbv1.ProbePass
	probeFail    = wbv1.ProbeFail
	probeError   = wbv1.ProbeError
)

// IsFinal says whether a probe has its result.
func IsFinal(s *wbv1.ProbeStatus) bool { return wbv1.ProbeIsFinal(s.Result) }

func probeResultFor(conds []metav1.Condition) wbv1.ProbeResult { return wbv1.ProbeResultFor(conds) }

func probeOwned(s *wbv1.ProbeStatus) wbv1.ProbeStatus {
	return wbv1.ProbeStatus{
		Result: s.Result, ObservedAt: s.ObservedAt, Observed: s.Observed, Diagnostics: s.Diagnostics, Refusal: s.Refusal,
		ObservedGeneration: s.ObservedGeneration,
		Conditions:         statusapply.Owned(s.Conditions, wbv1.ConditionCompleted, wbv1.ConditionReconciling, wbv1.ConditionStalled),
	}
}

// Deps is what the room needs.
type Deps struct {
	NodeName string
	Client   client.Client
	// Engine evaluates the probe's condition against its source.
	Engine *waits.Engine
	// Scope maps a probe's scope onto the source observing it: nodekit.ErrNotYet while the
	// scoped resource is not available in this process, a refusal when it cannot be.
	Scope func(ctx context.Context, ns string, s *wbv1.Scope, watch bool) (waits.Source, error)
	// Observe records an answered probe as an edge of the environment's active recordings.
	Observe func(ctx context.Context, ns, envName, session string, kind skills.EdgeKind, name, condition, result string)
	Event   nodekit.EventFunc
}

type probeReconciler struct{ a *Deps }

// Reconcile evaluates a probe once, now, within its timeout, and records the result.
// A probe only reads: evaluating it again after a failed status write is harmless.
func (r *probeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.a
	var pr wbv1.Probe
	if err := a.Client.Get(ctx, req.NamespacedName, &pr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pr.Labels[wbv1.NodeLabel] != a.NodeName || IsFinal(&pr.Status) {
		return ctrl.Result{}, nil
	}
	cur, next := probeOwned(&pr.Status), probeOwned(&pr.Status)
	set := func(result wbv1.ProbeResult, msg string) {
		statusapply.Set(&next.Conditions, &next.Conditions, statusapply.Cond(wbv1.ConditionCompleted, true, string(result), msg, pr.Generation))
	}
	refuse := func(code, msg string) {
		now := metav1.Now()
		next.ObservedAt = &now
		next.Refusal = &wbv1.Refusal{Code: code, Message: statusapply.Truncate(msg, 1024)}
		next.Diagnostics = []wbv1.WaitDiagnostic{wbv1.WaitDiagnostic(waits.DiagProbeFailed)}
		set(probeError, code+": "+msg)
	}
	preq, err := waits.ConditionRequest(string(pr.UID), &pr.Spec.Condition)
	if err == nil {
		preq.Source, err = a.Scope(ctx, pr.Namespace, pr.Spec.Scope, false)
	}
	switch {
	case errors.Is(err, nodekit.ErrNotYet):
		if end := pr.CreationTimestamp.Add(probeScopeGrace); time.Now().Before(end) {
			// Woken when its scope becomes available here; the requeue is the grace's end.
			return ctrl.Result{RequeueAfter: statusapply.RequeueAt(time.Now(), end)}, nil
		}
		refuse(string(actuation.CodeEnvironmentUnavailable), "the scoped resource did not become available on this node")
	case string(actuation.CodeOf(err)) != "":
		refuse(string(actuation.CodeOf(err)), err.Error())
	case err != nil:
		return ctrl.Result{}, err
	default:
		res, err := a.Engine.Probe(ctx, preq, time.Duration(pr.Spec.TimeoutSeconds)*time.Second)
		if err != nil {
			code := string(actuation.CodeOf(err))
			if code == "" {
				code = string(actuation.CodeSourceFailed)
			}
			refuse(code, err.Error())
			break
		}
		r.record(&next, res)
		msg := res.Observation.Detail
		if res.Err != nil {
			msg = res.Err.Error()
		}
		set(wbv1.ProbeResult(res.Result), msg)
		if res.Result != waits.ProbeError {
			a.Observe(ctx, pr.Namespace, pr.Labels[wbv1.EnvironmentLabel], nodekit.ScopeSession(pr.Spec.Scope), skills.EdgeProbe,
				pr.Name, string(pr.Spec.Condition.Kind), string(res.Result)) // seed 004
		}
	}
	next.Result = probeResultFor(next.Conditions)
	next.ObservedGeneration = pr.Generation
	nodekit.SetHealth(&next.Conditions, wbv1.ProbeHealth(next.Result), string(next.Result), "probe is "+string(next.Result), pr.Generation)
	wrote, err := statusapply.Apply(ctx, a.Client, nodekit.FieldManager+"probe", &pr, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote {
		evType := corev1.EventTypeNormal
		if next.Result == probeError {
			evType = corev1.EventTypeWarning
		}
		a.Event(&pr, evType, string(next.Result), "Probe "+string(pr.Spec.Condition.Kind)+" is "+string(next.Result))
	}
	return ctrl.Result{}, nil
}

// record copies the probe's observation (sequence numbers and digests only).
func (r *probeReconciler) record(next *wbv1.ProbeStatus, res waits.ProbeResult) {
	at := metav1.NewTime(res.ObservedAt)
	next.ObservedAt = &at
	if o := res.Observation; o.SeqFrom != 0 || o.SeqTo != 0 || o.Digest != "" {
		next.Observed = &wbv1.Observed{SeqFrom: int64(o.SeqFrom), SeqTo: int64(o.SeqTo), Digest: wbv1.Digest(o.Digest)}
	}
	for _, d := range res.Diagnostics {
		if len(next.Diagnostics) < waits.MaxDiagnostics {
			next.Diagnostics = append(next.Diagnostics, wbv1.WaitDiagnostic(d))
		}
	}
	if res.Result == waits.ProbeError {
		code := string(actuation.CodeOf(res.Err))
		switch {
		case code != "":
		case errors.Is(res.Err, waits.ErrProbeTimeout):
			code = string(actuation.CodeProbeTimedOut)
		default:
			code = string(actuation.CodeSourceFailed)
		}
		next.Refusal = &wbv1.Refusal{Code: code, Message: statusapply.Truncate(res.Err.Error(), 1024)}
	}
}

// Setup registers the probe reconciler with mgr. Probes evaluate inline, each bounded by
// its timeout (at most 30s): a few workers keep one slow source from delaying the others.
// wake re-queues probes whose scope became available in this process; awaitingScope maps
// a command or session event to the probes that may have waited for it.
func Setup(mgr ctrl.Manager, d Deps, wake <-chan event.GenericEvent, awaitingScope handler.MapFunc) error {
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.Probe{}).Named("node-probe").
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		WatchesRawSource(source.Channel(wake, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.TerminalCommand{}, handler.EnqueueRequestsFromMapFunc(awaitingScope)).
		Watches(&wbv1.TerminalSession{}, handler.EnqueueRequestsFromMapFunc(awaitingScope)).
		Complete(&probeReconciler{a: &d}); err != nil {
		return fmt.Errorf("probe controller: %w", err)
	}
	return nil
}

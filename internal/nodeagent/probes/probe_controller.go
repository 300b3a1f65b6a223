package agent

import (
	"context"
	"errors"
	"sensorium.dev/workbench/internal/skills"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/waits"
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

func probeIsFinal(s *wbv1.ProbeStatus) bool { return wbv1.ProbeIsFinal(s.Result) }

func probeResultFor(conds []metav1.Condition) wbv1.ProbeResult { return wbv1.ProbeResultFor(conds) }

func probeOwned(s *wbv1.ProbeStatus) wbv1.ProbeStatus {
	return wbv1.ProbeStatus{
		Result: s.Result, ObservedAt: s.ObservedAt, Observed: s.Observed, Diagnostics: s.Diagnostics, Refusal: s.Refusal,
		ObservedGeneration: s.ObservedGeneration,
		Conditions:         statusapply.Owned(s.Conditions, wbv1.ConditionCompleted, wbv1.ConditionReconciling, wbv1.ConditionStalled),
	}
}

type probeReconciler struct{ a *Agent }

// Reconcile evaluates a probe once, now, within its timeout, and records the result.
// A probe only reads: evaluating it again after a failed status write is harmless.
func (r *probeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.a
	var pr wbv1.Probe
	if err := a.client.Get(ctx, req.NamespacedName, &pr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pr.Labels[wbv1.NodeLabel] != a.cfg.NodeName || probeIsFinal(&pr.Status) {
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
	preq, err := conditionRequest(string(pr.UID), &pr.Spec.Condition)
	if err == nil {
		preq.Source, err = a.scopeSource(ctx, pr.Namespace, pr.Spec.Scope, false)
	}
	switch {
	case errors.Is(err, errNotYet):
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
		res, err := a.engine.Probe(ctx, preq, time.Duration(pr.Spec.TimeoutSeconds)*time.Second)
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
			a.recordObservation(ctx, pr.Namespace, pr.Labels[wbv1.EnvironmentLabel], scopeSession(pr.Spec.Scope), skills.EdgeProbe,
				pr.Name, string(pr.Spec.Condition.Kind), string(res.Result)) // seed 004
		}
	}
	next.Result = probeResultFor(next.Conditions)
	next.ObservedGeneration = pr.Generation
	setHealth(&next.Conditions, wbv1.ProbeHealth(next.Result), string(next.Result), "probe is "+string(next.Result), pr.Generation)
	wrote, err := statusapply.Apply(ctx, a.client, FieldManager+"probe", &pr, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote {
		evType := corev1.EventTypeNormal
		if next.Result == probeError {
			evType = corev1.EventTypeWarning
		}
		a.recordEvent(&pr, evType, string(next.Result), "Probe "+string(pr.Spec.Condition.Kind)+" is "+string(next.Result))
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

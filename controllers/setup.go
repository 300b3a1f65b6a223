package controllers

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// Config tunes the controllers; zero values take the defaults.
type Config struct {
	// ConsentTimeoutSeconds is how long operators have to answer a consent request.
	ConsentTimeoutSeconds int64
	// BindingRecheck is how often an active grant's operator is re-checked.
	BindingRecheck time.Duration
	// NodeLostAfter is how long a node may be silent before the manager releases the
	// cleanup finalizers of its deleted objects without its report (DefaultNodeLostAfter).
	NodeLostAfter time.Duration
	// Clock is the controllers' time source (time.Now when nil). Tests advance it to pass
	// a deadline (an Environment's ttlSeconds, at least 60) without sleeping through it.
	Clock func() time.Time
}

// SetupWithManager registers every cluster controller with the manager.
func SetupWithManager(mgr ctrl.Manager, cfg Config) error {
	c := mgr.GetClient()
	now := time.Now
	if cfg.Clock != nil {
		now = cfg.Clock
	}
	cooldown := actuation.NewDenyCooldown()
	gate := func(recorder string) ConsentGate {
		return ConsentGate{Client: c, Recorder: mgr.GetEventRecorder(recorder), Now: now, ConsentTimeoutSeconds: cfg.ConsentTimeoutSeconds, Cooldown: cooldown}
	}
	for _, s := range []interface{ SetupWithManager(ctrl.Manager) error }{
		&EnvironmentReconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("workbench-environment"), Now: now},
		&EnvironmentPoolReconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("workbench-environmentpool")},
		&CommandProfileReconciler{Client: c},
		&ConsentRequestReconciler{Client: c, Recorder: mgr.GetEventRecorder("workbench-consent"), Now: now, Cooldown: cooldown},
		&ConsentGrantReconciler{Client: c, Recorder: mgr.GetEventRecorder("workbench-consent"), Now: now, Recheck: cfg.BindingRecheck},
		&TerminalCommandReconciler{gate("workbench-command")},
		sessionBinder(c, now), waitBinder(c, now), probeBinder(c, now), patchBinder(c, now),
		&SessionCapacityReconciler{Client: c}, &ImageManifestReconciler{Client: c},
		&ActionCatalogReconciler{Client: c},
		&ActionRunReconciler{gate("workbench-action")},
		recordingBinder(c, now), &SkillReplayReconciler{Client: c, Recorder: mgr.GetEventRecorder("workbench-skillreplay"), Now: now},
	} {
		if err := s.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	for _, s := range append(cleanupReconcilers(c, now, cfg.NodeLostAfter), declaredReconcilers(c)...) {
		if err := s.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	return nil
}

func refusal(code actuation.Code, msg string) *wbv1.Refusal {
	return &wbv1.Refusal{Code: string(code), Message: truncate(msg, 1024)}
}

// failed is the conditions of an object the binder fails with msg: its own condition
// (condType, status, reason) first, then the health conditions of health for phase.
func failed(condType string, status bool, reason string, health wbv1.Health, phase, msg string, gen int64) []metav1.Condition {
	return append([]metav1.Condition{cond(condType, status, reason, msg, gen)}, wbv1.HealthConditions(health, phase, msg, gen)...)
}

// applyBinding applies next, the whole status the binder writes of o (under its own field
// manager, over nothing it owned before).
func applyBinding[S any](ctx context.Context, c client.Client, o client.Object, next S) error {
	var none S
	_, err := applyStatus(ctx, c, "binding", o, none, next)
	return err
}

func sessionBinder(c client.Client, now func() time.Time) *BindingReconciler[*wbv1.TerminalSession] {
	return &BindingReconciler[*wbv1.TerminalSession]{
		Client: c, Now: now, Kind: "TerminalSession", NewObj: func() *wbv1.TerminalSession { return &wbv1.TerminalSession{} },
		NewList: func() client.ObjectList { return &wbv1.TerminalSessionList{} },
		EnvOf: func(_ context.Context, _ client.Reader, o *wbv1.TerminalSession) (string, error) {
			return string(o.Spec.EnvironmentRef), nil
		},
		Final: func(o *wbv1.TerminalSession) bool { return wbv1.SessionPhaseIsFinal(o.Status.Phase) },
		Fail: func(ctx context.Context, c client.Client, o *wbv1.TerminalSession, code actuation.Code, msg string) error {
			conds := failed(wbv1.ConditionReady, false, wbv1.ReasonFailed, wbv1.HealthStalled, string(wbv1.SessionFailed), string(code)+": "+msg, o.Generation)
			return applyBinding(ctx, c, o, wbv1.TerminalSessionStatus{Phase: wbv1.SessionFailed, Refusal: refusal(code, msg), ObservedGeneration: o.Generation, Conditions: conds})
		},
	}
}

func waitBinder(c client.Client, now func() time.Time) *BindingReconciler[*wbv1.Wait] {
	return &BindingReconciler[*wbv1.Wait]{
		Client: c, Now: now, Kind: "Wait", NewObj: func() *wbv1.Wait { return &wbv1.Wait{} },
		NewList: func() client.ObjectList { return &wbv1.WaitList{} },
		EnvOf: func(ctx context.Context, r client.Reader, o *wbv1.Wait) (string, error) {
			return envOfScope(ctx, r, o.Namespace, o.Spec.Scope)
		},
		Final: func(o *wbv1.Wait) bool { return wbv1.WaitIsFinal(o.Status.ConditionStatus) },
		Correlate: func(ctx context.Context, r client.Reader, o *wbv1.Wait) (string, error) {
			return scopeCorrelation(ctx, r, o, o.Spec.Scope)
		},
		Fail: func(ctx context.Context, c client.Client, o *wbv1.Wait, code actuation.Code, msg string) error {
			conds := failed(wbv1.ConditionCompleted, true, string(wbv1.WaitFailed), wbv1.WaitHealth(wbv1.WaitFailed), string(wbv1.WaitFailed), string(code)+": "+msg, o.Generation)
			return applyBinding(ctx, c, o, wbv1.WaitStatus{ConditionStatus: wbv1.WaitStatusFor(conds), Refusal: refusal(code, msg), ObservedGeneration: o.Generation, Conditions: conds})
		},
	}
}

func probeBinder(c client.Client, now func() time.Time) *BindingReconciler[*wbv1.Probe] {
	return &BindingReconciler[*wbv1.Probe]{
		Client: c, Now: now, Kind: "Probe", NewObj: func() *wbv1.Probe { return &wbv1.Probe{} },
		NewList: func() client.ObjectList { return &wbv1.ProbeList{} },
		EnvOf: func(ctx context.Context, r client.Reader, o *wbv1.Probe) (string, error) {
			return envOfScope(ctx, r, o.Namespace, o.Spec.Scope)
		},
		Final: func(o *wbv1.Probe) bool { return wbv1.ProbeIsFinal(o.Status.Result) },
		Correlate: func(ctx context.Context, r client.Reader, o *wbv1.Probe) (string, error) {
			return scopeCorrelation(ctx, r, o, o.Spec.Scope)
		},
		Fail: func(ctx context.Context, c client.Client, o *wbv1.Probe, code actuation.Code, msg string) error {
			conds := failed(wbv1.ConditionCompleted, true, string(wbv1.ProbeError), wbv1.ProbeHealth(wbv1.ProbeError), string(wbv1.ProbeError), string(code)+": "+msg, o.Generation)
			return applyBinding(ctx, c, o, wbv1.ProbeStatus{Result: wbv1.ProbeResultFor(conds), Refusal: refusal(code, msg), ObservedGeneration: o.Generation, Conditions: conds})
		},
	}
}

func patchBinder(c client.Client, now func() time.Time) *BindingReconciler[*wbv1.FilePatch] {
	return &BindingReconciler[*wbv1.FilePatch]{
		Client: c, Now: now, Kind: "FilePatch", NewObj: func() *wbv1.FilePatch { return &wbv1.FilePatch{} },
		NewList: func() client.ObjectList { return &wbv1.FilePatchList{} },
		EnvOf: func(_ context.Context, _ client.Reader, o *wbv1.FilePatch) (string, error) {
			return string(o.Spec.EnvironmentRef), nil
		},
		Final: func(o *wbv1.FilePatch) bool { return wbv1.FilePatchIsFinal(o.Status.Phase) },
		Fail: func(ctx context.Context, c client.Client, o *wbv1.FilePatch, code actuation.Code, msg string) error {
			conds := failed(wbv1.ConditionApplied, false, wbv1.ReasonRefused, wbv1.FilePatchHealth(wbv1.FilePatchRejected), string(wbv1.FilePatchRejected), string(code)+": "+msg, o.Generation)
			return applyBinding(ctx, c, o, wbv1.FilePatchStatus{Phase: wbv1.FilePatchPhaseFor(conds), Refusal: refusal(code, msg), ObservedGeneration: o.Generation, Conditions: conds})
		},
	}
}

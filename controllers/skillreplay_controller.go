package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/skills"
	"sensorium.dev/workbench/internal/skillsapi"
)

// SkillReplayReconciler replays a Skill into an environment, one step at a time, through
// the same admission as any caller: each step becomes a TerminalCommand (in a session the
// replay opens) or a FilePatch (which waits for an operator's approval like any other),
// admitted or refused by the webhooks, profiles and consent. A Recording it opens on the
// target makes the node report each edge's state hashes; the skills core compares them
// with the skill's expectations and the replay halts at the first divergence.
type SkillReplayReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Now      func() time.Time
}

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=skillreplays,verbs=get;list;watch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=skillreplays/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=skills,verbs=get;list;watch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=recordings;terminalsessions;terminalcommands;filepatches,verbs=get;list;watch;create;update;patch

// SetupWithManager registers the reconciler; step objects it owns wake it.
func (r *SkillReplayReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&wbv1.SkillReplay{}).Named("skillreplay").
		Owns(&wbv1.TerminalCommand{}).Owns(&wbv1.FilePatch{}).Owns(&wbv1.Recording{}).Owns(&wbv1.TerminalSession{}).
		Complete(r)
}

func skillReplayOwned(s *wbv1.SkillReplayStatus) wbv1.SkillReplayStatus {
	o := *s.DeepCopy()
	o.Conditions = ownedConditions(s.Conditions, wbv1.ConditionCompleted, wbv1.ConditionReconciling, wbv1.ConditionStalled)
	return o
}

func stepObjectName(sr string, i int) string {
	suffix := fmt.Sprintf("-%d", i)
	if len(sr) > 240 {
		sr = sr[:240]
	}
	return sr + suffix
}

// Reconcile implements reconcile.Reconciler.
func (r *SkillReplayReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sr wbv1.SkillReplay
	if err := r.Get(ctx, req.NamespacedName, &sr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if sr.Status.Result != "" && sr.Status.Result != wbv1.SkillReplayRunning {
		return ctrl.Result{}, nil
	}
	cur, next := skillReplayOwned(&sr.Status), skillReplayOwned(&sr.Status)
	res, err := r.step(ctx, &sr, &next)
	if err != nil {
		return ctrl.Result{}, err
	}
	next.ObservedGeneration = sr.Generation
	verdict := ""
	if next.Proof != nil {
		verdict = string(next.Proof.OverallVerdict)
	}
	reason := string(next.Result)
	for _, hc := range wbv1.HealthConditions(wbv1.SkillReplayHealth(next.Result, verdict), reason,
		truncate(fmt.Sprintf("replay %s, proof verdict %q", next.ResultText, verdict), 1024), sr.Generation) {
		setCondition(&next.Conditions, &next.Conditions, hc)
	}
	wrote, err := applyStatus(ctx, r.Client, "skillreplay", &sr, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote && next.Result != wbv1.SkillReplayRunning && next.Result != cur.Result && r.Recorder != nil {
		verdict := ""
		if next.Proof != nil {
			verdict = string(next.Proof.OverallVerdict)
		}
		evType := corev1.EventTypeNormal
		if next.Result != wbv1.SkillReplaySuccess || verdict != string(skills.VerdictPass) {
			evType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(&sr, nil, evType, string(next.Result), "Replay", "Replay %s, fidelity %s, proof verdict %s", next.ResultText, next.Fidelity, verdict)
	}
	return res, nil
}

// replayScope is one pass's view of a replay.
type replayScope struct {
	sr       *wbv1.SkillReplay
	next     *wbv1.SkillReplayStatus
	manifest *skills.Manifest
	plan     *skills.Plan
	report   *skills.ReplayReport
}

func (r *SkillReplayReconciler) step(ctx context.Context, sr *wbv1.SkillReplay, next *wbv1.SkillReplayStatus) (ctrl.Result, error) {
	now := r.Now()
	if next.ReplayID == "" {
		next.ReplayID = skills.NewID()
		next.StartTime = &metav1.Time{Time: now}
		next.Result, next.ResultText = wbv1.SkillReplayRunning, "running"
	}
	// unread ends the pass on a reference that could not be read: a read error, a wait while
	// the replay is younger than ReferenceGrace (GitOps applies objects in any order), then
	// the whole replay's refusal (code).
	unread := func(err error, code actuation.Code, what, name string) (ctrl.Result, error) {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		if now.Sub(sr.CreationTimestamp.Time) < ReferenceGrace {
			return ctrl.Result{RequeueAfter: ReferenceGrace}, nil
		}
		return r.refuseWhole(sr, next, code, what+" "+name+" does not exist"), nil
	}
	var sk wbv1.Skill
	if err := r.Get(ctx, types.NamespacedName{Namespace: sr.Namespace, Name: string(sr.Spec.SkillRef)}, &sk); err != nil {
		return unread(err, actuation.CodeSkillInvalid, "skill", string(sr.Spec.SkillRef))
	}
	m, err := skillsapi.Manifest(&sk.Spec)
	if err != nil {
		return r.refuseWhole(sr, next, actuation.CodeSkillInvalid, err.Error()), nil
	}
	var env wbv1.Environment
	if err := r.Get(ctx, types.NamespacedName{Namespace: sr.Namespace, Name: string(sr.Spec.EnvironmentRef)}, &env); err != nil {
		return unread(err, actuation.CodeEnvironmentUnavailable, "environment", string(sr.Spec.EnvironmentRef))
	}
	if env.Status.Phase != wbv1.EnvironmentReady {
		return ctrl.Result{RequeueAfter: PlacementRecheck}, nil // the environment's readiness is not owned here: recheck
	}
	params := map[string]string{}
	for _, p := range sr.Spec.Parameters {
		params[p.Name] = p.Value
	}
	mode := skills.ReplayMode(sr.Spec.Mode)
	if mode == "" {
		mode = skills.ModeExact
	}
	plan, err := skills.NewPlan(m, params, string(env.Spec.Backend), mode)
	if err != nil {
		code := actuation.CodeOf(err)
		if code == "" {
			code = actuation.CodeSkillInvalid
		}
		return r.refuseWhole(sr, next, code, err.Error()), nil
	}
	next.Backend = string(env.Spec.Backend)
	sc := &replayScope{sr: sr, next: next, manifest: m, plan: plan}
	sc.report = skillsapi.Report(&wbv1.SkillReplay{ObjectMeta: sr.ObjectMeta, Spec: sr.Spec, Status: *next}, m)

	// The Recording through which the node reports state hashes, and the session for commands.
	rec, err := r.ensureRecording(ctx, sr, &env)
	if err != nil {
		return ctrl.Result{}, err
	}
	next.RecordingRef = wbv1.ObjectName(rec.Name)
	if rec.Status.Phase == wbv1.RecordingPhaseFailed {
		msg := "the replay's recording failed"
		code := actuation.CodeSourceFailed
		if rec.Status.Refusal != nil {
			msg, code = rec.Status.Refusal.Message, actuation.Code(rec.Status.Refusal.Code)
		}
		return r.refuseWhole(sr, next, code, msg), nil
	}
	if rec.Status.Phase != wbv1.RecordingPhaseRecording || rec.Status.InitialStateDigest == "" {
		return ctrl.Result{}, nil // the Recording's status change wakes the replay
	}
	if next.InitialStateDigest == "" {
		next.InitialStateDigest = rec.Status.InitialStateDigest
	}
	k := len(next.Edges)
	for k < len(plan.Steps) && len(next.Denials) == 0 && !halted(next) {
		done, res, err := r.advance(ctx, sc, rec, k)
		if err != nil || !done {
			return res, err
		}
		k = len(next.Edges)
	}
	return ctrl.Result{}, r.complete(ctx, sc, rec)
}

func halted(st *wbv1.SkillReplayStatus) bool {
	for _, s := range st.Surprises {
		if s.Halted {
			return true
		}
	}
	return false
}

// refuseWhole ends a replay that cannot start: a denial at edge 1 with a stable code.
func (r *SkillReplayReconciler) refuseWhole(sr *wbv1.SkillReplay, next *wbv1.SkillReplayStatus, code actuation.Code, msg string) ctrl.Result {
	rep := &skills.ReplayReport{ReplayID: next.ReplayID, Backend: next.Backend, Edges: []skills.ReplayEdge{},
		Denials: []skills.Denial{{Edge: 1, Code: string(code), Message: msg}}}
	skills.Summarize(rep, 0, true)
	skillsapi.ReplayStatus(next, rep, nil)
	next.CompletionTime = &metav1.Time{Time: r.Now()}
	setCondition(&next.Conditions, &next.Conditions, cond(wbv1.ConditionCompleted, true, "Refused", truncate(string(code)+": "+msg, 1024), sr.Generation))
	return ctrl.Result{}
}

func (r *SkillReplayReconciler) ensureRecording(ctx context.Context, sr *wbv1.SkillReplay, env *wbv1.Environment) (*wbv1.Recording, error) {
	name := stepObjectName(sr.Name, 0) + "rec"
	var rec wbv1.Recording
	err := r.Get(ctx, types.NamespacedName{Namespace: sr.Namespace, Name: name}, &rec)
	if err == nil || !apierrors.IsNotFound(err) {
		return &rec, err
	}
	rec = wbv1.Recording{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sr.Namespace},
		Spec: wbv1.RecordingSpec{EnvironmentRef: wbv1.ObjectName(env.Name), SessionRef: ptrTo(wbv1.ObjectName(r.sessionName(sr)))}}
	if err := controllerutil.SetControllerReference(sr, &rec, r.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Create(ctx, &rec); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating Recording %s/%s for SkillReplay %s: %w", sr.Namespace, name, sr.Name, err)
	}
	return &rec, nil
}

func (r *SkillReplayReconciler) sessionName(sr *wbv1.SkillReplay) string {
	return stepObjectName(sr.Name, 0) + "session"
}

func ptrTo[T any](v T) *T { return &v }

// advance drives step k: create its object, wait for its outcome and its recorded edge,
// then evaluate. done says the step has its edge record.
func (r *SkillReplayReconciler) advance(ctx context.Context, sc *replayScope, rec *wbv1.Recording, k int) (bool, ctrl.Result, error) {
	sr, next, st := sc.sr, sc.next, sc.plan.Steps[k]
	if den := sc.plan.CheckCapabilities(k); den != nil {
		sc.report.Denials = append(sc.report.Denials, *den)
		skillsapi.ReplayStatus(next, sc.report, nil)
		return true, ctrl.Result{}, nil
	}
	name := stepObjectName(sr.Name, st.Index)
	timeout := time.Duration(sr.Spec.StepTimeoutSeconds) * time.Second
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	if st.Condition != nil {
		// Waits and probes name objects of the demonstration: replayed as a state check on
		// the state after the previous edge.
		state := string(next.InitialStateDigest)
		if n := len(next.Edges); n > 0 {
			state = next.Edges[n-1].StateAfter
		}
		e, s := sc.plan.Evaluate(k, skills.Observation{Object: "state-check", Before: skills.StateRef{Digest: state}, After: skills.StateRef{Digest: state},
			Outcome: st.ExpectedOutcome, Authorization: skills.Authorization{Kind: skills.AuthObserve, Ref: "state-check"}, ChangesKnown: true})
		r.record(sc, e, s)
		return true, ctrl.Result{}, nil
	}
	if next.CurrentObject != name {
		if err := r.createStep(ctx, sc, k, name); err != nil {
			if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
				// Refused at admission: the webhook's answer is the denial.
				code := refusalCodeOf(err.Error())
				e := skills.ReplayEdge{Seq: st.Index, Object: name, Backend: sc.plan.Backend, Outcome: skills.Outcome{Phase: "Refused", Code: code}, Match: skills.MatchRefused}
				sc.report.Denials = append(sc.report.Denials, skills.Denial{Edge: st.Index, Code: code, Message: truncate(err.Error(), 1024)})
				r.record(sc, e, &skills.SurpriseSignal{Edge: st.Index, Kind: skills.SurpriseRefused, Halted: true, Message: truncate(err.Error(), 1024)})
				return true, ctrl.Result{}, nil
			}
			return false, ctrl.Result{}, err
		}
		next.CurrentObject = name
		next.StepStartTime = &metav1.Time{Time: r.Now()}
		return false, ctrl.Result{RequeueAfter: timeout}, nil
	}
	phase, exit, code, msg, final, err := r.stepOutcome(ctx, sr.Namespace, name, st.Kind)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if !final {
		if next.StepStartTime != nil && r.Now().After(next.StepStartTime.Add(timeout)) {
			e := skills.ReplayEdge{Seq: st.Index, Object: name, Backend: sc.plan.Backend, Outcome: skills.Outcome{Phase: "TimedOut", Code: string(actuation.CodeTimeoutAboveMax)}, Match: skills.MatchDiverged}
			r.record(sc, e, &skills.SurpriseSignal{Edge: st.Index, Kind: skills.SurpriseOutcome, Halted: true,
				Message: fmt.Sprintf("step %s had no outcome within %s (awaiting admission, consent or approval)", name, timeout)})
			return true, ctrl.Result{}, nil
		}
		return false, ctrl.Result{RequeueAfter: requeueAt(r.Now(), next.StepStartTime.Add(timeout))}, nil
	}
	if phase == "Refused" || phase == "Rejected" {
		e, s := sc.plan.Evaluate(k, skills.Observation{Object: name, Outcome: skills.Outcome{Phase: "Refused", Code: code}})
		sc.report.Denials = append(sc.report.Denials, skills.Denial{Edge: st.Index, Code: code, Message: truncate(msg, 1024)})
		r.record(sc, e, s)
		return true, ctrl.Result{}, nil
	}
	var edge *wbv1.RecordedEdge
	for i := range rec.Status.RecentEdges {
		if string(rec.Status.RecentEdges[i].Object) == name {
			edge = &rec.Status.RecentEdges[i]
		}
	}
	if edge == nil {
		return false, ctrl.Result{}, nil // the Recording's status update wakes the replay
	}
	kind, ref, _ := strings.Cut(edge.Authorization, ":")
	obs := skills.Observation{Object: name, Before: skills.StateRef{Digest: string(edge.StateBefore)}, After: skills.StateRef{Digest: string(edge.StateAfter)},
		Outcome: skills.Outcome{Phase: edge.Phase, ExitCode: edge.ExitCode, Code: edge.Code}, OutputDigest: string(edge.OutputDigest),
		Authorization: skills.Authorization{Kind: skills.AuthorizationKind(kind), Ref: ref},
		Changes:       skillsapi.CoreChanges(edge.Changes), ChangesKnown: !edge.ChangesTruncated, Gap: skillsapi.CoreChanges(edge.OutOfBand)}
	if st.Command != nil {
		obs.Profile = st.Command.Profile
	}
	_ = exit
	e, s := sc.plan.Evaluate(k, obs)
	r.record(sc, e, s)
	return true, ctrl.Result{}, nil
}

func (r *SkillReplayReconciler) record(sc *replayScope, e skills.ReplayEdge, s *skills.SurpriseSignal) {
	sc.report.Edges = append(sc.report.Edges, e)
	if s != nil {
		sc.report.Surprises = append(sc.report.Surprises, *s)
	}
	skills.Summarize(sc.report, len(sc.plan.Steps), false)
	skillsapi.ReplayStatus(sc.next, sc.report, nil)
	sc.next.CurrentObject, sc.next.StepStartTime = "", nil
}

// refusalCodeOf finds the stable code in a webhook's refusal message.
func refusalCodeOf(msg string) string {
	for _, c := range actuation.Codes() {
		if strings.Contains(msg, string(c)+":") {
			return string(c)
		}
	}
	return string(actuation.CodeInvalidSpec)
}

func (r *SkillReplayReconciler) createStep(ctx context.Context, sc *replayScope, k int, name string) error {
	sr, st := sc.sr, sc.plan.Steps[k]
	var obj client.Object
	switch {
	case st.Command != nil:
		if err := r.ensureSession(ctx, sr); err != nil {
			return err
		}
		obj = &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sr.Namespace},
			Spec: wbv1.TerminalCommandSpec{SessionRef: wbv1.ObjectName(r.sessionName(sr)), ProfileRef: wbv1.ObjectName(st.Command.Profile),
				Argv: st.Command.Argv, Cwd: wbv1.CwdAddress{Root: wbv1.RootName(st.Command.Cwd.Root), Path: wbv1.RelativePath(st.Command.Cwd.Path)}}}
	case st.Patch != nil:
		fp := &wbv1.FilePatch{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sr.Namespace},
			Spec: wbv1.FilePatchSpec{EnvironmentRef: sr.Spec.EnvironmentRef, Root: wbv1.RootName(st.Patch.Root), Format: wbv1.PatchFormat(st.Patch.Format), Patch: st.Patch.Patch}}
		create, del := false, false
		for _, op := range st.Patch.Operations {
			o := wbv1.FileOperation{Op: wbv1.FileOperationKind(op.Op), Path: wbv1.RelativePath(op.Path), Content: op.Content}
			fp.Spec.Operations = append(fp.Spec.Operations, o)
			create = create || op.Op == "create"
			del = del || op.Op == "delete"
		}
		for _, c := range st.ExpectedChanges {
			create = create || c.Before == nil
			del = del || c.After == nil
		}
		fp.Spec.Policy = wbv1.PatchPolicy{AllowCreate: &create, AllowDelete: &del}
		d, err := actuation.PatchDigest(fp.Spec.InlineUnifiedPatch(), fp.Spec.Operations)
		if err != nil {
			return err
		}
		fp.Spec.Digest = wbv1.Digest(d)
		obj = fp
	default:
		return fmt.Errorf("step %d of SkillReplay %s has nothing to create", st.Index, sr.Name)
	}
	if err := controllerutil.SetControllerReference(sr, obj, r.Scheme()); err != nil {
		return err
	}
	if err := r.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func (r *SkillReplayReconciler) ensureSession(ctx context.Context, sr *wbv1.SkillReplay) error {
	ts := &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: r.sessionName(sr), Namespace: sr.Namespace},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: sr.Spec.EnvironmentRef}}
	if err := controllerutil.SetControllerReference(sr, ts, r.Scheme()); err != nil {
		return err
	}
	if err := r.Create(ctx, ts); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating TerminalSession %s for SkillReplay %s: %w", ts.Name, sr.Name, err)
	}
	return nil
}

// stepOutcome reads the step object's outcome.
func (r *SkillReplayReconciler) stepOutcome(ctx context.Context, ns, name string, kind skills.EdgeKind) (phase string, exit *int32, code, msg string, final bool, err error) {
	switch kind {
	case skills.EdgeCommand:
		var c wbv1.TerminalCommand
		if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &c); err != nil {
			return "", nil, "", "", false, client.IgnoreNotFound(err)
		}
		if !wbv1.CommandIsFinal(c.Status.Conditions) {
			return "", nil, "", "", false, nil
		}
		if c.Status.Refusal != nil {
			code, msg = c.Status.Refusal.Code, c.Status.Refusal.Message
		}
		return string(wbv1.CommandPhaseFor(c.Status.Conditions)), c.Status.ExitCode, code, msg, true, nil
	default:
		var fp wbv1.FilePatch
		if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &fp); err != nil {
			return "", nil, "", "", false, client.IgnoreNotFound(err)
		}
		if !wbv1.FilePatchIsFinal(fp.Status.Phase) {
			return "", nil, "", "", false, nil
		}
		if fp.Status.Refusal != nil {
			code, msg = fp.Status.Refusal.Code, fp.Status.Refusal.Message
		} else if fp.Status.Phase == wbv1.FilePatchRejected {
			code, msg = string(actuation.CodeConsentDenied), "an operator rejected the patch"
		}
		return string(fp.Status.Phase), nil, code, msg, true, nil
	}
}

// complete summarizes the replay, computes its proof from the evidence it observed and
// stops its Recording (the node then stores the replay's own trace).
func (r *SkillReplayReconciler) complete(ctx context.Context, sc *replayScope, rec *wbv1.Recording) error {
	next := sc.next
	skills.Summarize(sc.report, len(sc.plan.Steps), true)
	started := time.Time{}
	if next.StartTime != nil {
		started = next.StartTime.Time.UTC().Truncate(time.Second)
	}
	trace := skills.ReplayTrace(sc.plan, sc.report, string(next.InitialStateDigest), started)
	repro := skills.Reproducible(sc.report)
	proof := skills.ComputeProof(skills.ProofEvidence{Manifest: sc.manifest, Trace: trace, Replay: sc.report, HashReproducible: &repro, Now: r.Now()})
	skillsapi.ReplayStatus(next, sc.report, &proof)
	next.CompletionTime = &metav1.Time{Time: r.Now()}
	setCondition(&next.Conditions, &next.Conditions, cond(wbv1.ConditionCompleted, true, string(next.Result),
		truncate(fmt.Sprintf("%s, fidelity %s, proof verdict %s", next.ResultText, next.Fidelity, proof.OverallVerdict), 1024), sc.sr.Generation))
	if rec.Spec.DesiredState != wbv1.RecordingStopped {
		orig := rec.DeepCopy()
		rec.Spec.DesiredState = wbv1.RecordingStopped
		if err := r.Patch(ctx, rec, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("stopping Recording %s of SkillReplay %s: %w", rec.Name, sc.sr.Name, err)
		}
	}
	return nil
}

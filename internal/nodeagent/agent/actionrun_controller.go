package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/actionexec"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/artifactout"
	"sensorium.dev/workbench/internal/platform/egress"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/platform/writecap"
	"sensorium.dev/workbench/internal/statusapply"
)

// ActionRun bounds.
const (
	// maxStatusStdout is the retained stdout written to status (the API's cap).
	maxStatusStdout = 4096
	// maxTouchedFiles and maxTranscript are the status lists' caps.
	maxTouchedFiles = 256
	maxTranscript   = 256
	maxArtifactRefs = 64
	// actionScopeGrace bounds how long an admitted run waits for its environment to be
	// ready on this node before it is refused.
	actionScopeGrace = 2 * time.Minute
)

// actionRunReconciler runs admitted ActionRuns bound to this node under their class's
// envelope (internal/nodeagent/actionexec), re-verifying authorization with the core
// (internal/actions) immediately before spawn. Exactly one outcome is recorded per run:
// the start is stored before any process exists, the outcome is stored before status
// shows it, and a stored start without a live process in this agent means a previous
// process started it: the run ends Failed/interrupted, never re-run.
type actionRunReconciler struct {
	a        *Agent
	wake     chan event.GenericEvent
	stopping atomic.Bool
	// runs are the ActionRuns this process started (runtable.go: the command path's one
	// start → record → outcome implementation).
	runs *runTable[actionOutcome]

	supportOnce sync.Once
	support     []wbv1.ActionClassSupport
	// probing is the one slot of the action-class probe (actionrun_support.go): held
	// while it runs, and taken for good by the agent's shutdown, which so waits for a
	// probe in flight (its scratch directory removed) and lets none start after.
	probing chan struct{}
}

// actionOutcome is the one recorded outcome, stored on the run's start record before
// status shows it.
type actionOutcome struct {
	Phase            wbv1.ActionRunPhase     `json:"phase"`
	ExitCode         *int32                  `json:"exitCode,omitempty"`
	SignalOrigin     string                  `json:"signalOrigin,omitempty"`
	StdoutBytes      int64                   `json:"stdoutBytes,omitempty"`
	StderrBytes      int64                   `json:"stderrBytes,omitempty"`
	Truncated        bool                    `json:"truncated,omitempty"`
	Stdout           string                  `json:"stdout,omitempty"`
	OutputDigest     string                  `json:"outputDigest,omitempty"`
	ResultPointers   map[string]string       `json:"resultPointers,omitempty"`
	TouchedFiles     []wbv1.TouchedFile      `json:"touchedFiles,omitempty"`
	TouchedTruncated bool                    `json:"touchedTruncated,omitempty"`
	Transcript       []wbv1.ConnectionRecord `json:"transcript,omitempty"`
	Artifacts        []wbv1.ArtifactRef      `json:"artifacts,omitempty"`
	RefusalCode      string                  `json:"refusalCode,omitempty"`
	Message          string                  `json:"message,omitempty"`
	Started          time.Time               `json:"started,omitempty"`
	Completed        time.Time               `json:"completed"`
}

func actionRunOwned(s *wbv1.ActionRunStatus) wbv1.ActionRunStatus {
	return wbv1.ActionRunStatus{
		NodeName: s.NodeName, StartTime: s.StartTime, CompletionTime: s.CompletionTime, ExitCode: s.ExitCode,
		SignalOrigin: s.SignalOrigin, StdoutBytes: s.StdoutBytes, StderrBytes: s.StderrBytes, Truncated: s.Truncated,
		Stdout: s.Stdout, OutputDigest: s.OutputDigest, ResultPointers: s.ResultPointers, TouchedFiles: s.TouchedFiles,
		TouchedFilesTruncated: s.TouchedFilesTruncated, NetworkTranscript: s.NetworkTranscript, ArtifactRefs: s.ArtifactRefs,
		Refusal:    s.Refusal,
		Conditions: statusapply.Owned(s.Conditions, wbv1.ConditionStarted, wbv1.ConditionCompleted),
	}
}

// setupActionRuns registers the ActionRun reconciler (this node's runs only: the cache
// filters on the node label).
func (a *Agent) setupActionRuns(mgr ctrl.Manager) error {
	r := &actionRunReconciler{a: a, wake: make(chan event.GenericEvent, 1024), runs: newRunTable[actionOutcome]("action run", a.store),
		probing: make(chan struct{}, 1)}
	a.actionRuns = r
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.ActionRun{}).Named("node-actionrun").
		WatchesRawSource(source.Channel(r.wake, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(r.runsOfEnvironment)).
		Complete(r); err != nil {
		return fmt.Errorf("action run controller: %w", err)
	}
	// When the manager stops, every running action is stopped (its end is recorded
	// interrupted, never cancelled: nobody cancelled it).
	return mgr.Add(managerRunnable(func(ctx context.Context) error {
		<-ctx.Done()
		r.stopping.Store(true)
		for _, h := range r.runs.shutdown() {
			select {
			case <-h.Done():
			case <-time.After(procexec.MaxGrace + 5*time.Second):
			}
		}
		return nil
	}))
}

func (r *actionRunReconciler) runsOfEnvironment(ctx context.Context, obj client.Object) []ctrl.Request {
	var runs wbv1.ActionRunList
	if err := r.a.client.List(ctx, &runs, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var out []ctrl.Request
	for _, run := range runs.Items {
		if string(run.Spec.EnvironmentRef) == obj.GetName() && !wbv1.ActionRunIsFinal(run.Status.Conditions) {
			out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&run)})
		}
	}
	return out
}

type runPass struct {
	run    *wbv1.ActionRun
	next   *wbv1.ActionRunStatus
	all    *[]metav1.Condition
	result ctrl.Result
}

func (p *runPass) set(t string, ok bool, reason, msg string) {
	statusapply.Set(&p.next.Conditions, p.all, statusapply.Cond(t, ok, reason, msg, p.run.Generation))
}

func (r *actionRunReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.a
	var run wbv1.ActionRun
	if err := a.client.Get(ctx, req.NamespacedName, &run); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.runs.stop(func(la *liveAction) bool { return la.key == req.NamespacedName })
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if run.Labels[wbv1.NodeLabel] != a.cfg.NodeName || !condTrue(run.Status.Conditions, wbv1.ConditionAdmitted) {
		return ctrl.Result{}, nil
	}
	if wbv1.ActionRunIsFinal(run.Status.Conditions) {
		r.runs.forget(string(run.UID))
		return ctrl.Result{}, nil
	}
	cur, next := actionRunOwned(&run.Status), actionRunOwned(&run.Status)
	all := append([]metav1.Condition(nil), run.Status.Conditions...)
	p := &runPass{run: &run, next: &next, all: &all}
	if err := r.step(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	before, after := run.Status.Phase, wbv1.ActionRunPhaseFor(all)
	wrote, err := statusapply.Apply(ctx, a.client, FieldManager+"actionrun", &run, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wbv1.ActionRunIsFinal(all) {
		r.runs.forget(string(run.UID))
	}
	if wrote && before != after {
		evType := corev1.EventTypeNormal
		if after != wbv1.ActionRunRunning && after != wbv1.ActionRunSucceeded {
			evType = corev1.EventTypeWarning
		}
		a.recordEvent(&run, evType, string(after), fmt.Sprintf("Action run is %s on node %s", after, a.cfg.NodeName))
	}
	return p.result, nil
}

// finish writes the outcome. Every owned field is set again, so a pass that read a stale
// copy never drops what an earlier pass wrote.
func (p *runPass) finish(o *actionOutcome) {
	if !o.Started.IsZero() {
		p.next.StartTime = &metav1.Time{Time: o.Started}
		p.set(wbv1.ConditionStarted, true, "Started", "the process was started on this node")
	}
	p.next.ExitCode = o.ExitCode
	p.next.SignalOrigin = wbv1.SignalOrigin(o.SignalOrigin)
	p.next.StdoutBytes, p.next.StderrBytes, p.next.Truncated = o.StdoutBytes, o.StderrBytes, o.Truncated
	p.next.Stdout, p.next.OutputDigest = o.Stdout, wbv1.Digest(o.OutputDigest)
	p.next.ResultPointers = o.ResultPointers
	p.next.TouchedFiles, p.next.TouchedFilesTruncated = o.TouchedFiles, o.TouchedTruncated
	p.next.NetworkTranscript, p.next.ArtifactRefs = o.Transcript, o.Artifacts
	p.next.CompletionTime = &metav1.Time{Time: o.Completed}
	if o.RefusalCode != "" {
		p.next.Refusal = &wbv1.Refusal{Code: o.RefusalCode, Message: statusapply.Truncate(o.Message, 1024)}
	}
	p.set(wbv1.ConditionCompleted, true, string(o.Phase), statusapply.Truncate(o.Message, 1024))
}

func (p *runPass) refuse(code actuation.Code, msg string) {
	p.finish(&actionOutcome{Phase: wbv1.ActionRunRefused, RefusalCode: string(code), Message: string(code) + ": " + msg, Completed: time.Now()})
}

func (r *actionRunReconciler) step(ctx context.Context, p *runPass) error {
	a := r.a
	uid := string(p.run.UID)
	cancelled := !p.run.DeletionTimestamp.IsZero() || p.run.Spec.DesiredState == wbv1.CommandDesiredCancelled
	p.next.NodeName = a.cfg.NodeName
	live, result, err := r.runs.settle(uid)
	if err != nil {
		return err
	}
	if live != nil {
		if result != nil {
			p.finish(result)
			return nil
		}
		if cancelled {
			r.runs.stop(func(la *liveAction) bool { return la == live })
			p.result.RequeueAfter = time.Second
		}
		p.next.StartTime = &metav1.Time{Time: live.started}
		p.set(wbv1.ConditionStarted, true, "Started", "the process runs on this node")
		return nil
	}
	rec, ok, err := r.runs.stored(uid)
	if err != nil {
		return err
	}
	if ok {
		o, err := r.runs.outcomeOf(rec, func() *actionOutcome {
			return &actionOutcome{Phase: wbv1.ActionRunFailed, RefusalCode: string(actuation.CodeInterrupted), Completed: time.Now(),
				Message: "interrupted: the node agent restarted while the action ran; it is never re-run (" + rec.Outcome + ")"}
		})
		if err != nil {
			return err
		}
		p.finish(o)
		return nil
	}
	if cancelled {
		p.finish(&actionOutcome{Phase: wbv1.ActionRunCancelled, SignalOrigin: string(procexec.OriginCancel), Completed: time.Now(),
			Message: "cancelled (deleted or desiredState Cancelled) before it started"})
		return nil
	}
	return r.start(ctx, p)
}

// authorize reads the catalog, the signers and the policy afresh from the API server and
// asks the core again: a catalog edited (or a signer removed) after admission stops here.
func (r *actionRunReconciler) authorize(ctx context.Context, run *wbv1.ActionRun) (actions.Decision, error) {
	a := r.a
	var cat wbv1.ActionCatalog
	if err := a.reader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: string(run.Spec.CatalogRef)}, &cat); err != nil {
		if apierrors.IsNotFound(err) {
			return actions.Decision{Refusal: actuation.Refuse(actuation.CodeCatalogEntryMissing, "spec.catalogRef", "catalog %s does not exist", run.Spec.CatalogRef)}, nil
		}
		return actions.Decision{}, err
	}
	var signers wbv1.ActionSignerList
	if err := a.reader.List(ctx, &signers); err != nil {
		return actions.Decision{}, err
	}
	var pol wbv1.WorkbenchPolicy
	if err := a.reader.Get(ctx, types.NamespacedName{Name: "default"}, &pol); client.IgnoreNotFound(err) != nil {
		return actions.Decision{}, err
	}
	specJSON, err := json.Marshal(&cat.Spec)
	if err != nil {
		return actions.Decision{}, fmt.Errorf("encoding catalog %s/%s: %w", cat.Namespace, cat.Name, err)
	}
	in := actions.AuthorizeInput{Namespace: run.Namespace, CatalogName: cat.Name, SpecJSON: specJSON, ActionID: run.Spec.ActionID,
		ExpectedSpecDigest: string(run.Spec.ExpectedSpecDigest)}
	if s := run.Spec.Signing; s != nil {
		in.Signing = &actions.SigningRequest{Domain: s.Domain, Signatures: s.Signatures}
	}
	if s := cat.Signature; s != nil {
		in.Signature = &actions.Signature{SignerRef: s.SignerRef, SpecDigest: string(s.SpecDigest), Value: s.Value}
	}
	for _, s := range signers.Items {
		cs := actions.Signer{Name: s.Name, PublicKey: s.Spec.PublicKey, Namespaces: s.Spec.Namespaces}
		for _, c := range s.Spec.Classes {
			cs.Classes = append(cs.Classes, actions.Class(c))
		}
		in.Signers = append(in.Signers, cs)
	}
	raw, err := json.Marshal(pol.Spec)
	if err == nil {
		err = json.Unmarshal(raw, &in.Policy)
	}
	if err != nil {
		return actions.Decision{}, fmt.Errorf("converting the workbench policy: %w", err)
	}
	if run.Spec.Parameters != nil {
		in.Params = run.Spec.Parameters.Raw
	}
	if run.Spec.TimeoutSeconds != nil {
		in.TimeoutSeconds = *run.Spec.TimeoutSeconds
	}
	return actions.Authorize(in), nil
}

func (r *actionRunReconciler) start(ctx context.Context, p *runPass) error {
	a := r.a
	run := p.run
	var env wbv1.Environment
	if err := a.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: string(run.Spec.EnvironmentRef)}, &env); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		return r.notYet(p, "environment "+string(run.Spec.EnvironmentRef)+" is not bound to this node")
	}
	if env.Status.NodeName != a.cfg.NodeName {
		return nil
	}
	roots, ready := a.mountedRoots(string(env.UID))
	if !ready {
		return r.notYet(p, "environment "+env.Name+" is not ready on this node")
	}
	if a.guestEnvOf(&env) != nil {
		p.refuse(actuation.CodeActionClassUnavailable, "action classes are enforced by the host sandbox; environment "+env.Name+" runs in a VM guest")
		return nil
	}
	if err := a.verifyRoots(string(env.UID), roots); err != nil {
		p.refuse(actuation.Code(codeOf(err)), err.Error())
		return nil
	}
	// Re-verify everything at dispatch.
	d, err := r.authorize(ctx, run)
	if err != nil {
		return err
	}
	if !d.Allowed {
		p.refuse(d.Refusal.Code, d.Refusal.Error())
		return nil
	}
	if d.SpecDigest != string(run.Status.SpecDigest) {
		p.refuse(actuation.CodeActionCatalogUnauthorized, fmt.Sprintf("catalog %s is now %s, the run was admitted against %s", run.Spec.CatalogRef, d.SpecDigest, run.Status.SpecDigest))
		return nil
	}
	if !slices.Equal(d.Argv, run.Status.Argv) {
		p.refuse(actuation.CodeActionCatalogUnauthorized, "the argv rendered at dispatch differs from the argv rendered at admission")
		return nil
	}
	act := d.Action
	if sup := r.classSupport(act.Class); sup.Availability != wbv1.ActionAvailable {
		p.refuse(actuation.CodeActionClassUnavailable, fmt.Sprintf("class %s is unavailable on node %s: %s %s", act.Class, a.cfg.NodeName, sup.Code, sup.Message))
		return nil
	}
	if act.Class == actions.ClassOperatorGated {
		if code, msg := r.consentGranted(ctx, run); code != "" {
			p.refuse(code, msg)
			return nil
		}
	}
	envl, code, msg := envelopeFor(act, d, roots)
	if code != "" {
		p.refuse(code, msg)
		return nil
	}
	envl.Resources, envl.CgroupID = environmentLimits(&env), string(run.UID)
	prep, err := actionexec.Prepare(envl, actionexec.Options{WorkBase: filepath.Join(a.cfg.StateDir, "tmp", "actions"), Store: a.blobs})
	if err != nil {
		c := string(actuation.CodeOf(err))
		if c == "" {
			return err
		}
		p.refuse(actuation.Code(c), err.Error())
		return nil
	}
	// The command path's one sequence (runTable.launch): the start record is stored while
	// the sandbox is set up, and the program runs only once it landed.
	la := &liveAction{key: client.ObjectKeyFromObject(run), finished: make(chan struct{})}
	h, o, late, proceed, err := r.runs.launch(a.runner, launchSpec[actionOutcome]{
		uid: string(run.UID), spec: prep.Spec(), running: string(wbv1.ActionRunRunning), live: la,
		// p is the recording goroutine's until launch returns.
		record: func() (store.Command, bool, error) {
			rec, created, err := a.store.RecordCommandStart(recordFor(run, d))
			if err == nil && !created {
				p.result.RequeueAfter = time.Second // a record appeared meanwhile: the next pass reads it
			}
			return rec, err == nil && created, err
		},
		startFailed: func(err error) *actionOutcome {
			o := &actionOutcome{Phase: wbv1.ActionRunRefused, Message: err.Error(), Completed: time.Now()}
			if refused, code := startRefusal(err); refused {
				o.RefusalCode = code
			} else {
				o.Phase, o.RefusalCode = wbv1.ActionRunFailed, code
			}
			return o
		},
		pidDelay: a.cgroups != nil && a.cgroups.Available(),
	})
	if err != nil || !proceed || o != nil {
		prep.Abort() // nothing runs in the envelope
	}
	if err != nil || !proceed {
		return err
	}
	if o != nil {
		p.finish(o)
		return nil
	}
	go r.await(run.DeepCopy(), act, h, prep, la.started)
	if late {
		// Started after shutdown took its list: nothing of it may outlive the agent.
		h.Kill(procexec.OriginCancel)
		<-h.Done()
		return nil
	}
	now := metav1.NewTime(la.started)
	p.next.StartTime = &now
	p.set(wbv1.ConditionStarted, true, "Started", fmt.Sprintf("pid %d, class %s (%s) envelope", h.Info().Pid, act.Class, actions.SeedName(act.Class)))
	if o := r.runs.coalesce(la); o != nil {
		p.finish(o)
	}
	return nil
}

// notYet waits for the run's environment, then refuses once the grace has passed.
func (r *actionRunReconciler) notYet(p *runPass, why string) error {
	if time.Since(p.run.CreationTimestamp.Time) >= actionScopeGrace {
		p.refuse(actuation.CodeEnvironmentUnavailable, why)
		return nil
	}
	p.result.RequeueAfter = statusapply.RequeueAt(time.Now(), p.run.CreationTimestamp.Add(actionScopeGrace))
	return nil
}

func recordFor(run *wbv1.ActionRun, d actions.Decision) store.Command {
	return store.Command{UID: string(run.UID), Namespace: run.Namespace, Name: "actionrun/" + run.Name, ArgvDigest: d.ParamsDigest}
}

// consentGranted re-checks a C7 run's consent: the ConsentRequest the manager named must
// be Granted.
func (r *actionRunReconciler) consentGranted(ctx context.Context, run *wbv1.ActionRun) (actuation.Code, string) {
	ref := run.Status.ConsentRequestRef
	if ref == "" {
		return actuation.CodeConsentRequired, "an operator-gated action runs only after consent; the run names no ConsentRequest"
	}
	var cr wbv1.ConsentRequest
	if err := r.a.reader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: ref}, &cr); err != nil {
		return actuation.CodeConsentRequired, fmt.Sprintf("consent request %s: %v", ref, err)
	}
	switch cr.Status.Decision {
	case wbv1.DecisionGranted:
		return "", ""
	case wbv1.DecisionDenied:
		return actuation.CodeConsentDenied, "consent request " + ref + " was denied"
	case wbv1.DecisionExpired:
		return actuation.CodeConsentExpired, "consent request " + ref + " expired"
	case wbv1.DecisionRevoked:
		return actuation.CodeConsentRevoked, "consent request " + ref + " was revoked"
	}
	return actuation.CodeConsentRequired, "consent request " + ref + " is " + string(cr.Status.Decision)
}

// envelopeFor resolves an authorized action against the environment's mounted roots.
func envelopeFor(act *actions.Action, d actions.Decision, roots []backends.MountedRoot) (actionexec.Envelope, actuation.Code, string) {
	e := actionexec.Envelope{
		Class: string(act.Class), Effects: act.Effects(), Argv: d.Argv,
		Executable:  actionexec.Executable{Kind: act.Executable.Kind, Path: act.Executable.Path, Interpreter: act.Executable.Interpreter, SHA256: act.Executable.SHA256},
		Timeout:     time.Duration(d.TimeoutSeconds) * time.Second,
		StdoutBytes: act.OutputLimits.StdoutBytes, StderrBytes: act.OutputLimits.StderrBytes,
	}
	if !slices.Contains(e.Effects, actionexec.EffectRead) {
		e.Effects = append([]string{actionexec.EffectRead}, e.Effects...)
	}
	if act.Script != nil {
		e.ScriptRoots = act.Script.AllowedRoots
	}
	for _, v := range d.Env {
		e.Env = append(e.Env, v.Name+"="+v.Value)
	}
	for _, r := range roots {
		if r.Path != "" {
			e.ReadableRoots = append(e.ReadableRoots, r.Path)
		}
	}
	if wd := act.WorkingDirectory; wd != nil {
		dir, code, msg := resolveDir(roots, *wd)
		if code != "" {
			return e, code, msg
		}
		e.Dir = dir
	}
	if w := act.FSWrite; w != nil && slices.Contains(e.Effects, actionexec.EffectScopedFSWrite) {
		dir, code, msg := resolveDir(roots, w.WriteRoot)
		if code != "" {
			return e, code, msg
		}
		e.WriteRoot = dir
		e.Write = &writecap.Policy{MaxBytesTotal: w.MaxBytesTotal, MaxBytesPerFile: w.MaxBytesPerFile, PathPattern: w.PathPattern}
	}
	if g := act.Egress; g != nil && slices.Contains(e.Effects, actionexec.EffectEgressNetwork) {
		pol := egress.Policy{MaxBytesTotal: g.MaxBytesTotal, MaxBytesPerConnection: g.MaxBytesPerConnection}
		for _, ep := range g.Endpoints {
			pol.Endpoints = append(pol.Endpoints, egress.Endpoint{Host: ep.Host, Port: int(ep.Port), Protocol: egress.Protocol(ep.Protocol)})
		}
		e.Egress = &pol
	}
	if art := act.Artifact; art != nil && slices.Contains(e.Effects, actionexec.EffectArtifactProduce) {
		e.Artifact = &artifactout.Policy{MaxCount: int(art.MaxCount), MaxBytesPer: art.MaxBytesPer, MaxBytesTotal: art.MaxBytesTotal,
			AllowedMediaTypes: art.AllowedMediaTypes}
	}
	return e, "", ""
}

// resolveDir resolves a root + path to an existing host directory beneath the root, with
// no symlink on the way.
func resolveDir(roots []backends.MountedRoot, at actuation.CwdAddress) (string, actuation.Code, string) {
	i := slices.IndexFunc(roots, func(r backends.MountedRoot) bool { return r.Name == at.Root })
	if i < 0 || roots[i].Path == "" {
		return "", actuation.CodeWorkingDirectoryForbidden, "root " + at.Root + " is not a root of the environment on this node"
	}
	base := roots[i].Path
	if at.Path == "" {
		return base, "", ""
	}
	root, err := fsaccess.OpenRoot(base)
	if err != nil {
		return "", actuation.CodeWorkingDirectoryForbidden, err.Error()
	}
	defer func() { _ = root.Close() }()
	fi, err := root.NoSymlinks().Lstat(at.Path)
	if err != nil {
		return "", actuation.CodeWorkingDirectoryForbidden, fmt.Sprintf("%s/%s: %v", at.Root, at.Path, err)
	}
	if fi.Type != fsaccess.TypeDir {
		return "", actuation.CodeWorkingDirectoryForbidden, fmt.Sprintf("%s/%s is not a directory", at.Root, at.Path)
	}
	return filepath.Join(base, at.Path), "", ""
}

// await waits for the process, finishes the envelope (commit, promotion), persists the
// outcome and wakes the reconciler to write it.
func (r *actionRunReconciler) await(run *wbv1.ActionRun, act *actions.Action, h *procexec.Handle, prep *actionexec.Run, started time.Time) {
	res, runErr := h.Wait()
	o := &actionOutcome{Started: started, SignalOrigin: string(res.SignalOrigin),
		StdoutBytes: res.OutputBytesSeen, StderrBytes: res.StderrBytesSeen, Truncated: res.Truncated || res.StderrTruncated}
	sum := sha256.Sum256(res.Output)
	o.OutputDigest = "sha256:" + hex.EncodeToString(sum[:])
	o.Stdout = truncateUTF8(string(res.Output), maxStatusStdout)
	switch {
	case runErr != nil:
		o.Phase, o.RefusalCode, o.Message = wbv1.ActionRunFailed, string(actuation.CodeOf(runErr)), runErr.Error()
	case res.SignalOrigin == procexec.OriginTimeout:
		o.Phase, o.RefusalCode, o.Message = wbv1.ActionRunTimedOut, string(actuation.CodeActionTimeout), "timed out; the process group was terminated"
	case res.SignalOrigin == procexec.OriginCancel && r.stopping.Load():
		o.Phase, o.RefusalCode, o.SignalOrigin = wbv1.ActionRunFailed, string(actuation.CodeInterrupted), ""
		o.Message = "interrupted: the node agent stopped while the action ran"
	case res.SignalOrigin == procexec.OriginCancel || res.SignalOrigin == procexec.OriginOperator:
		o.Phase, o.Message = wbv1.ActionRunCancelled, "cancelled ("+string(res.SignalOrigin)+")"
	case res.ExitCode == 0:
		o.Phase, o.Message = wbv1.ActionRunSucceeded, "exited 0"
	default:
		o.Phase, o.Message = wbv1.ActionRunFailed, fmt.Sprintf("exited %d %s", res.ExitCode, res.Signal)
	}
	if res.Signal == "" || res.SignalOrigin == procexec.OriginExit {
		code := int32(res.ExitCode)
		o.ExitCode = &code
	}
	capt, ferr := prep.Finish(o.Phase != wbv1.ActionRunSucceeded)
	applyCapture(o, capt)
	if ferr != nil && o.RefusalCode == "" {
		o.Phase, o.RefusalCode, o.Message = wbv1.ActionRunFailed, string(actuation.CodeCleanupIncomplete), "finishing the envelope: "+ferr.Error()
	}
	if o.Phase == wbv1.ActionRunSucceeded && o.RefusalCode == "" {
		if ptrs, ref := actions.ResultPointers(act, res.Output); ref != nil {
			o.Phase, o.RefusalCode, o.Message = wbv1.ActionRunFailed, string(ref.Code), ref.Error()
		} else {
			o.ResultPointers = ptrs
		}
	}
	if capt.Artifacts != nil && capt.Code == "" && ferr == nil {
		if err := r.createArtifacts(run, capt.Artifacts.Artifacts, o); err != nil && o.RefusalCode == "" {
			o.Phase, o.RefusalCode, o.Message = wbv1.ActionRunFailed, string(actuation.CodeStartFailed), "recording artifacts: "+err.Error()
		}
	}
	if !res.CleanupComplete && runErr == nil {
		o.Message += "; cleanup incomplete: processes of the group may remain"
	}
	o.Completed = time.Now()
	r.record(string(run.UID), o)
	r.a.wake(r.wake, run)
}

// applyCapture moves the envelope's capture into the outcome: a cap reached while
// writing or producing fails the run with its code (nothing was committed or promoted).
func applyCapture(o *actionOutcome, c actionexec.Capture) {
	if w := c.Writes; w != nil {
		for i, f := range w.Files {
			if i >= maxTouchedFiles {
				o.TouchedTruncated = true
				break
			}
			o.TouchedFiles = append(o.TouchedFiles, wbv1.TouchedFile{Path: f.Path, Size: f.Size, Digest: wbv1.Digest(f.SHA256)})
		}
	}
	if tr := c.Transcript; tr != nil {
		for i, cn := range tr.Connections {
			if i >= maxTranscript {
				break
			}
			code := cn.Code
			if code == "" && cn.Outcome != egress.OutcomeOK {
				code = cn.Outcome
			}
			proto := wbv1.EgressProtocol(cn.Protocol)
			if proto == "" {
				proto = "tcp" // not a declared endpoint: what was asked for is a TCP connection
			}
			o.Transcript = append(o.Transcript, wbv1.ConnectionRecord{Host: truncateUTF8(cn.Host, 253), Port: int32(cn.Port), Protocol: proto,
				BytesOut: cn.BytesOut, BytesIn: cn.BytesIn, DurationMillis: cn.Duration.Milliseconds(), Code: code})
		}
		for _, q := range tr.DNS {
			if !q.Allowed && len(o.Transcript) < maxTranscript {
				o.Transcript = append(o.Transcript, wbv1.ConnectionRecord{Host: truncateUTF8(q.Name, 253), Port: 53, Protocol: "udp", Code: string(actuation.CodeEgressDNSNameForbidden)})
			}
		}
	}
	if c.Code != "" && (o.RefusalCode == "" || o.Phase == wbv1.ActionRunSucceeded || o.Phase == wbv1.ActionRunFailed) {
		if o.RefusalCode == "" {
			o.RefusalCode = c.Code
			o.Message = c.Code + ": " + c.Message + " (" + o.Message + ")"
			if o.Phase == wbv1.ActionRunSucceeded {
				o.Phase = wbv1.ActionRunFailed
			}
		}
	}
}

// createArtifacts records each promoted artifact as an Artifact object of the run's
// environment on this node (owned by the run) and lists it in the outcome.
func (r *actionRunReconciler) createArtifacts(run *wbv1.ActionRun, arts []artifactout.Artifact, o *actionOutcome) error {
	a := r.a
	ctx := context.Background()
	if a.runCtx != nil {
		ctx = a.runCtx
	}
	for i, art := range arts {
		if i >= maxArtifactRefs {
			break
		}
		name := artifactName(run.Name, i)
		obj := &wbv1.Artifact{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: run.Namespace,
			Labels: withCorrelation(map[string]string{wbv1.NodeLabel: a.cfg.NodeName}, run)},
			Spec: wbv1.ArtifactSpec{EnvironmentRef: run.Spec.EnvironmentRef, Source: wbv1.ArtifactSource("action")}}
		if l := run.Labels[wbv1.EnvironmentLabel]; l != "" {
			obj.Labels[wbv1.EnvironmentLabel] = l
		}
		if err := controllerutil.SetOwnerReference(run, obj, a.client.Scheme()); err != nil {
			return err
		}
		// Create fills obj from the server's answer; an artifact left by an earlier pass is
		// read from the API server (the cache may not hold it yet).
		if err := a.client.Create(ctx, obj); apierrors.IsAlreadyExists(err) {
			if err := a.reader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return fmt.Errorf("reading artifact %s/%s: %w", run.Namespace, name, err)
			}
		} else if err != nil {
			return fmt.Errorf("creating artifact %s/%s: %w", run.Namespace, name, err)
		}
		cur := artifactOwned(&obj.Status)
		next := cur
		until := metav1.NewTime(obj.CreationTimestamp.Add(defaultRetention))
		next.Digest, next.Size, next.NodeName, next.RetainedUntil = wbv1.Digest(art.SHA256), art.Size, a.cfg.NodeName, &until
		next.ObservedGeneration = obj.Generation
		statusapply.Set(&next.Conditions, &next.Conditions, statusapply.Cond(wbv1.ConditionReady, true, "Stored",
			fmt.Sprintf("%d bytes (%s) produced by action run %s, held by node %s", art.Size, art.MediaType, run.Name, a.cfg.NodeName), obj.Generation))
		if _, err := statusapply.Apply(ctx, a.client, FieldManager+"artifact", obj, cur, next); err != nil {
			return err
		}
		o.Artifacts = append(o.Artifacts, wbv1.ArtifactRef{Name: wbv1.ObjectName(name), Digest: wbv1.Digest(art.SHA256),
			MediaType: art.MediaType, Size: art.Size, Role: truncateUTF8(art.Path, 253)})
	}
	return nil
}

func artifactName(run string, i int) string {
	suffix := fmt.Sprintf("-a%d", i)
	if len(run)+len(suffix) <= 253 {
		return run + suffix
	}
	sum := sha256.Sum256([]byte(run))
	return run[:253-len(suffix)-9] + "-" + hex.EncodeToString(sum[:4]) + suffix
}

func (r *actionRunReconciler) record(uid string, o *actionOutcome) {
	err := r.runs.record(uid, o, func(la *liveAction, o *actionOutcome) {
		if la.stopping && o.Phase == wbv1.ActionRunFailed && o.ExitCode == nil && o.RefusalCode != string(actuation.CodeInterrupted) {
			o.Phase, o.RefusalCode, o.Message = wbv1.ActionRunCancelled, "", "cancelled: the run was deleted or cancelled ("+o.Message+")"
		}
	})
	if err != nil && r.a.runCtx != nil {
		ctrl.LoggerFrom(r.a.runCtx).Error(err, "Storing an action run outcome; the next pass retries", "actionRun", uid)
	}
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

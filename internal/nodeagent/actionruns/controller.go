package actionruns

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/actionexec"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/runs"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/artifactout"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/platform/procexec"
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

// Deps is what the ActionRun room needs of the node agent.
type Deps struct {
	// Ctx is the agent's run context: the outcome goroutines' wakes and logs, and the
	// artifacts a run produced are recorded under it.
	Ctx      context.Context
	NodeName string
	// StateDir is the agent's state directory: envelopes and the class probe work under
	// its tmp/.
	StateDir string
	Client   client.Client // the node's cache
	Reader   client.Reader // the API server, uncached (catalogs, signers, policy, consent)
	Store    *store.DB     // start records and outcomes (through runs.Table)
	Runner   *procexec.Runner
	Blobs    artifactout.Store // promoted artifacts (C5)
	// Cgroups (nil: none) tells whether a run has its own cgroup, so its PID record may wait.
	Cgroups *cgroups.Manager
	// SandboxHelper is the sandbox helper binary (empty: this executable); SandboxErr why
	// the process sandbox cannot be established on this node (nil: it can). Every class is
	// unavailable while SandboxErr is set.
	SandboxHelper string
	SandboxErr    error
	// Roots returns an environment's mounted roots once it is ready in this process.
	Roots func(envUID string) ([]backends.MountedRoot, bool)
	// VerifyRoots re-checks the roots before a process starts in them (a refusal: nothing runs).
	VerifyRoots func(envUID string, roots []backends.MountedRoot) error
	// Executor is env's executor (its backend's port, backends.Env.Exec); an error is a
	// refusal with its code. Action classes run only where it enforces them (ActionClasses).
	Executor func(env *wbv1.Environment) (backends.Executor, error)
	// Limits are the cgroup limits of one process of env.
	Limits func(env *wbv1.Environment) cgroups.Limits
	Event  nodekit.EventFunc
}

// Room runs admitted ActionRuns bound to this node under their class's envelope
// (internal/nodeagent/actionexec), re-verifying authorization with the core
// (internal/actions) immediately before spawn. Exactly one outcome is recorded per run
// (internal/nodeagent/runs): the start is stored before any process exists, the outcome
// is stored before status shows it, and a stored start without a live process in this
// agent means a previous process started it: the run ends Failed/interrupted, never
// re-run. It imports nothing of the agent: Deps is all it sees.
type Room struct {
	d        Deps
	wake     chan event.GenericEvent
	stopping atomic.Bool
	// runs are the ActionRuns this process started (internal/nodeagent/runs: the command
	// path's one start → record → outcome implementation).
	runs *runs.Table[actionOutcome]

	supportOnce sync.Once
	support     []wbv1.ActionClassSupport
	// probing is the one slot of the action-class probe (support.go): held while it runs,
	// and taken for good by StopProbing at the agent's shutdown, which so waits for a
	// probe in flight (its scratch directory removed) and lets none start after.
	probing chan struct{}
}

// liveAction is an ActionRun this process started.
type liveAction = runs.Run[actionOutcome]

// New returns the ActionRun room over d.
func New(d Deps) *Room {
	return &Room{d: d, wake: make(chan event.GenericEvent, 1024), runs: runs.NewTable[actionOutcome]("action run", d.Store),
		probing: make(chan struct{}, 1)}
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

// RecordedPhase is the phase the run's start record carries with its outcome.
func (o actionOutcome) RecordedPhase() string { return string(o.Phase) }

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

// Setup registers the ActionRun reconciler (this node's runs only: the cache filters on
// the node label), and stops every running action when the manager stops.
func (r *Room) Setup(mgr ctrl.Manager) error {
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.ActionRun{}).Named("node-actionrun").
		WatchesRawSource(source.Channel(r.wake, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(r.runsOfEnvironment)).
		Complete(r); err != nil {
		return fmt.Errorf("action run controller: %w", err)
	}
	// When the manager stops, every running action is stopped (its end is recorded
	// interrupted, never cancelled: nobody cancelled it).
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.stopping.Store(true)
		for _, h := range r.runs.Shutdown() {
			select {
			case <-h.Done():
			case <-time.After(procexec.MaxGrace + 5*time.Second):
			}
		}
		return nil
	}))
}

func (r *Room) runsOfEnvironment(ctx context.Context, obj client.Object) []ctrl.Request {
	var runs wbv1.ActionRunList
	if err := r.d.Client.List(ctx, &runs, client.InNamespace(obj.GetNamespace())); err != nil {
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

func (r *Room) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var run wbv1.ActionRun
	if err := r.d.Client.Get(ctx, req.NamespacedName, &run); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.runs.Stop(func(la *liveAction) bool { return la.Key == req.NamespacedName })
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if run.Labels[wbv1.NodeLabel] != r.d.NodeName || !meta.IsStatusConditionTrue(run.Status.Conditions, wbv1.ConditionAdmitted) {
		return ctrl.Result{}, nil
	}
	if wbv1.ActionRunIsFinal(run.Status.Conditions) {
		r.runs.Forget(string(run.UID))
		return ctrl.Result{}, nil
	}
	cur, next := actionRunOwned(&run.Status), actionRunOwned(&run.Status)
	all := append([]metav1.Condition(nil), run.Status.Conditions...)
	p := &runPass{run: &run, next: &next, all: &all}
	if err := r.step(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	before, after := run.Status.Phase, wbv1.ActionRunPhaseFor(all)
	wrote, err := statusapply.Apply(ctx, r.d.Client, nodekit.FieldManager+"actionrun", &run, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wbv1.ActionRunIsFinal(all) {
		r.runs.Forget(string(run.UID))
	}
	if wrote && before != after {
		evType := corev1.EventTypeNormal
		if after != wbv1.ActionRunRunning && after != wbv1.ActionRunSucceeded {
			evType = corev1.EventTypeWarning
		}
		r.d.Event(&run, evType, string(after), fmt.Sprintf("Action run is %s on node %s", after, r.d.NodeName))
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

func (r *Room) step(ctx context.Context, p *runPass) error {
	uid := string(p.run.UID)
	cancelled := !p.run.DeletionTimestamp.IsZero() || p.run.Spec.DesiredState == wbv1.CommandDesiredCancelled
	p.next.NodeName = r.d.NodeName
	live, result, err := r.runs.Settle(uid)
	if err != nil {
		return err
	}
	if live != nil {
		if result != nil {
			p.finish(result)
			return nil
		}
		if cancelled {
			r.runs.Stop(func(la *liveAction) bool { return la == live })
			p.result.RequeueAfter = time.Second
		}
		p.next.StartTime = &metav1.Time{Time: live.Started}
		p.set(wbv1.ConditionStarted, true, "Started", "the process runs on this node")
		return nil
	}
	rec, ok, err := r.runs.Stored(uid)
	if err != nil {
		return err
	}
	if ok {
		o, err := r.runs.OutcomeOf(rec, func() *actionOutcome {
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
func (r *Room) authorize(ctx context.Context, run *wbv1.ActionRun) (actions.Decision, error) {
	var cat wbv1.ActionCatalog
	if err := r.d.Reader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: string(run.Spec.CatalogRef)}, &cat); err != nil {
		if apierrors.IsNotFound(err) {
			return actions.Decision{Refusal: actuation.Refuse(actuation.CodeCatalogEntryMissing, "spec.catalogRef", "catalog %s does not exist", run.Spec.CatalogRef)}, nil
		}
		return actions.Decision{}, err
	}
	var signers wbv1.ActionSignerList
	if err := r.d.Reader.List(ctx, &signers); err != nil {
		return actions.Decision{}, err
	}
	var pol wbv1.WorkbenchPolicy
	if err := r.d.Reader.Get(ctx, types.NamespacedName{Name: "default"}, &pol); client.IgnoreNotFound(err) != nil {
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

func (r *Room) start(ctx context.Context, p *runPass) error {
	run := p.run
	var env wbv1.Environment
	if err := r.d.Client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: string(run.Spec.EnvironmentRef)}, &env); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		return r.notYet(p, "environment "+string(run.Spec.EnvironmentRef)+" is not bound to this node")
	}
	if env.Status.NodeName != r.d.NodeName {
		return nil
	}
	roots, ready := r.d.Roots(string(env.UID))
	if !ready {
		return r.notYet(p, "environment "+env.Name+" is not ready on this node")
	}
	ex, err := r.d.Executor(&env)
	if err != nil {
		p.refuse(actuation.CodeOf(err), err.Error())
		return nil
	}
	if ref := ex.ActionClasses(); ref != nil {
		p.refuse(ref.Code, ref.Message+" (environment "+env.Name+")")
		return nil
	}
	if err := r.d.VerifyRoots(string(env.UID), roots); err != nil {
		p.refuse(actuation.CodeOf(err), err.Error())
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
		p.refuse(actuation.CodeActionClassUnavailable, fmt.Sprintf("class %s is unavailable on node %s: %s %s", act.Class, r.d.NodeName, sup.Code, sup.Message))
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
	envl.Resources, envl.CgroupID = r.d.Limits(&env), string(run.UID)
	prep, err := actionexec.Prepare(envl, actionexec.Options{WorkBase: filepath.Join(r.d.StateDir, "tmp", "actions"), Store: r.d.Blobs})
	if err != nil {
		c := string(actuation.CodeOf(err))
		if c == "" {
			return err
		}
		p.refuse(actuation.Code(c), err.Error())
		return nil
	}
	// The command path's one sequence (runs.Table.Launch): the start record is stored while
	// the sandbox is set up, and the program runs only once it landed.
	la := &liveAction{Key: client.ObjectKeyFromObject(run), Finished: make(chan struct{})}
	h, o, late, proceed, err := r.runs.Launch(r.d.Runner, runs.LaunchSpec[actionOutcome]{
		UID: string(run.UID), Spec: prep.Spec(), Running: string(wbv1.ActionRunRunning), Live: la,
		// p is the recording goroutine's until launch returns.
		Record: func() (store.Command, bool, error) {
			rec, created, err := r.d.Store.RecordCommandStart(recordFor(run, d))
			if err == nil && !created {
				p.result.RequeueAfter = time.Second // a record appeared meanwhile: the next pass reads it
			}
			return rec, err == nil && created, err
		},
		StartFailed: func(err error) *actionOutcome {
			o := &actionOutcome{Phase: wbv1.ActionRunRefused, Message: err.Error(), Completed: time.Now()}
			if refused, code := runs.StartRefusal(err); refused {
				o.RefusalCode = code
			} else {
				o.Phase, o.RefusalCode = wbv1.ActionRunFailed, code
			}
			return o
		},
		PIDDelay: r.d.Cgroups != nil && r.d.Cgroups.Available(),
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
	go r.await(run.DeepCopy(), act, h, prep, la.Started)
	if late {
		// Started after shutdown took its list: nothing of it may outlive the agent.
		h.Kill(procexec.OriginCancel)
		<-h.Done()
		return nil
	}
	now := metav1.NewTime(la.Started)
	p.next.StartTime = &now
	p.set(wbv1.ConditionStarted, true, "Started", fmt.Sprintf("pid %d, class %s (%s) envelope", h.Info().Pid, act.Class, actions.SeedName(act.Class)))
	if o := r.runs.Coalesce(la); o != nil {
		p.finish(o)
	}
	return nil
}

// notYet waits for the run's environment, then refuses once the grace has passed.
func (r *Room) notYet(p *runPass, why string) error {
	if time.Since(p.run.CreationTimestamp.Time) >= actionScopeGrace {
		p.refuse(actuation.CodeEnvironmentUnavailable, why)
		return nil
	}
	p.result.RequeueAfter = statusapply.RequeueAt(time.Now(), p.run.CreationTimestamp.Add(actionScopeGrace))
	return nil
}

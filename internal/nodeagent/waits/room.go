// The node agent's room for Waits: it resolves a wait's scope, registers it with the
// engine under the agent's long-lived context, persists the one outcome in the store before
// status, and writes it. It imports nothing of the agent: Deps is all it sees.

package waits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/skills"
	"sensorium.dev/workbench/internal/statusapply"
)

// Signals are the change signals of the conditions the agent feeds from its reconcilers
// and informers (terminal.command.done, environment.ready, artifact.present,
// operation.done). Each wakes the pending waits of its kind to observe again; nothing
// polls.
type Signals struct {
	Command, Environment, Artifact, Operation Broadcaster
}

// Deps is what the wait room needs of the node agent.
type Deps struct {
	// Ctx is the agent's run context: registered waits live as long as the agent.
	Ctx      context.Context
	NodeName string
	Client   client.Client // the node's cache
	Reader   client.Reader // the API server, uncached
	Store    *store.DB
	Engine   *Engine
	Signals  *Signals
	// Scope maps a wait's scope onto the source observing it (watch: true): nodekit.ErrNotYet
	// while the scoped resource is not available in this process, a refusal when it cannot be.
	Scope func(ctx context.Context, ns string, s *wbv1.Scope, watch bool) (Source, error)
	// Observe records a satisfied wait as an edge of the environment's active recordings.
	Observe func(ctx context.Context, ns, envName, session string, kind skills.EdgeKind, name, condition, result string)
	// Pending reports the engine's pending waits (the node's self-report).
	Pending func(n int)
	// Kick says the node's free capacity may have changed.
	Kick  func()
	Event nodekit.EventFunc
	// Wake re-queues a wait (its outcome arrived, or its scope became available).
	Wake chan event.GenericEvent
}

// Room holds the waits registered by this process.
type Room struct {
	d    Deps
	mu   sync.Mutex
	live map[string]*liveWait // wait UID → wait registered by this process
}

// New returns the wait room over d.
func New(d Deps) *Room { return &Room{d: d, live: map[string]*liveWait{}} }

// Setup registers the Wait reconciler: filtered to this node by the cache, woken by the
// room's channel, by the signals of the kinds a wait observes, and by commands and
// sessions reaching this node's cache (a wait whose scope was not available yet).
func (r *Room) Setup(mgr ctrl.Manager) error {
	// signal turns informer events of a kind into a change signal for the pending waits
	// observing it; it enqueues nothing.
	signal := func(bs ...*Broadcaster) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			for _, b := range bs {
				b.Broadcast()
			}
			return nil
		})
	}
	s := r.d.Signals
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.Wait{}).Named("node-wait").
		WatchesRawSource(source.Channel(r.d.Wake, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.Wait{}, signal(&s.Operation)).
		Watches(&wbv1.Environment{}, signal(&s.Environment)).
		Watches(&wbv1.Artifact{}, signal(&s.Artifact)).
		Watches(&wbv1.TerminalCommand{}, signal(&s.Command, &s.Operation)).
		Watches(&wbv1.Probe{}, signal(&s.Operation)).
		Watches(&wbv1.FilePatch{}, signal(&s.Operation)).
		Watches(&wbv1.TerminalCommand{}, handler.EnqueueRequestsFromMapFunc(r.awaitingScope)).
		Watches(&wbv1.TerminalSession{}, handler.EnqueueRequestsFromMapFunc(r.awaitingScope)).
		Complete(&waitReconciler{a: r}); err != nil {
		return fmt.Errorf("wait controller: %w", err)
	}
	return nil
}

// awaitingScope maps a command or session event to the waits of its namespace that are
// not registered in this process yet (their scope was not available): a scoped object
// reaching this node's cache is what they wait for.
func (r *Room) awaitingScope(ctx context.Context, o client.Object) []reconcile.Request {
	var list wbv1.WaitList
	if err := r.d.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return nodekit.RequestsOf(list.Items, func(w *wbv1.Wait) bool { return !waitIsFinal(&w.Status) && r.live[string(w.UID)] == nil })
}

// Pending lists the keys of the namespace's waits that have no outcome yet.
func Pending(ctx context.Context, c client.Reader, ns string) []reconcile.Request {
	var list wbv1.WaitList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil
	}
	return nodekit.RequestsOf(list.Items, func(w *wbv1.Wait) bool { return !waitIsFinal(&w.Status) })
}

// liveWait is a wait this process registered with the engine.
type liveWait struct {
	key     types.NamespacedName
	h       *Handle
	started time.Time
	result  *waitOutcome // set once the engine ended it (guarded by Room.mu)
}

// waitOutcome is the one recorded outcome of a wait. It is persisted in the store (as
// the record's reason) before it is written to status, so a restart between the two
// still reports the truth; it holds sequence numbers and digests only.
type waitOutcome struct {
	Status      wbv1.WaitConditionStatus `json:"status"`
	SeqFrom     uint64                   `json:"seqFrom,omitempty"`
	SeqTo       uint64                   `json:"seqTo,omitempty"`
	Digest      string                   `json:"digest,omitempty"`
	Diagnostics []string                 `json:"diagnostics,omitempty"`
	RefusalCode string                   `json:"refusalCode,omitempty"`
	Message     string                   `json:"message,omitempty"`
	Started     time.Time                `json:"started,omitempty"`
	DurationMS  int64                    `json:"durationMs,omitempty"`
}

func decodeWaitOutcome(s string) *waitOutcome {
	var o waitOutcome
	if s == "" || json.Unmarshal([]byte(s), &o) != nil || o.Status == "" || o.Status == wbv1.WaitPending {
		return nil
	}
	return &o
}

// waitIsFinal and waitStatusFor are the api/v1alpha1 derivations.
func waitIsFinal(s *wbv1.WaitStatus) bool { return wbv1.WaitIsFinal(s.ConditionStatus) }

func waitStatusFor(conds []metav1.Condition) wbv1.WaitConditionStatus {
	return wbv1.WaitStatusFor(conds)
}

func waitOwned(s *wbv1.WaitStatus) wbv1.WaitStatus {
	return wbv1.WaitStatus{
		ConditionStatus: s.ConditionStatus, Observed: s.Observed, Diagnostics: s.Diagnostics, DurationMilliseconds: s.DurationMilliseconds,
		Refusal: s.Refusal, NodeName: s.NodeName, StartTime: s.StartTime, ObservedGeneration: s.ObservedGeneration,
		Conditions: statusapply.Owned(s.Conditions, wbv1.ConditionCompleted, wbv1.ConditionReconciling, wbv1.ConditionStalled),
	}
}

type waitReconciler struct{ a *Room }

type waitPass struct {
	w       *wbv1.Wait
	next    *wbv1.WaitStatus
	outcome *waitOutcome // the final outcome this pass writes
	skip    bool         // the stored status is already final: write nothing
}

func (p *waitPass) set(ok bool, reason, msg string) {
	statusapply.Set(&p.next.Conditions, &p.next.Conditions, statusapply.Cond(wbv1.ConditionCompleted, ok, reason, msg, p.w.Generation))
}

// pending records a registered wait (one write, then nothing until its outcome).
func (p *waitPass) pending(started time.Time, deadline time.Time) {
	p.next.StartTime = &metav1.Time{Time: started.Truncate(time.Second)}
	p.set(false, string(wbv1.WaitPending), fmt.Sprintf("waiting for %s until %s; a wait never kills anything",
		p.w.Spec.Condition.Kind, deadline.UTC().Format(time.RFC3339)))
}

// finish records the outcome. Every owned field is set again, so a pass that read a stale
// copy never drops what an earlier pass wrote.
func (p *waitPass) finish(o *waitOutcome) {
	p.outcome = o
	if !o.Started.IsZero() {
		p.next.StartTime = &metav1.Time{Time: o.Started.Truncate(time.Second)}
	}
	p.next.Observed = nil
	if o.SeqFrom != 0 || o.SeqTo != 0 || o.Digest != "" {
		p.next.Observed = &wbv1.Observed{SeqFrom: int64(o.SeqFrom), SeqTo: int64(o.SeqTo), Digest: wbv1.Digest(o.Digest)}
	}
	p.next.Diagnostics = nil
	for _, d := range o.Diagnostics {
		if len(p.next.Diagnostics) < MaxDiagnostics {
			p.next.Diagnostics = append(p.next.Diagnostics, wbv1.WaitDiagnostic(d))
		}
	}
	p.next.DurationMilliseconds = o.DurationMS
	p.next.Refusal = nil
	if o.Status == wbv1.WaitFailed && o.RefusalCode != "" {
		p.next.Refusal = &wbv1.Refusal{Code: o.RefusalCode, Message: statusapply.Truncate(o.Message, 1024)}
	}
	p.set(true, string(o.Status), o.Message)
}

// fail ends a wait that was never registered (or no longer can be) with a code.
func (p *waitPass) fail(code, msg string) {
	p.finish(&waitOutcome{Status: wbv1.WaitFailed, RefusalCode: code, Message: code + ": " + msg})
}

func (r *waitReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.a
	defer a.d.Kick() // what this pass opened or ended changes the free capacity
	var w wbv1.Wait
	if err := a.d.Client.Get(ctx, req.NamespacedName, &w); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, a.forgetWait(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if w.Labels[wbv1.NodeLabel] != a.d.NodeName || waitIsFinal(&w.Status) {
		return ctrl.Result{}, nil
	}
	cur, next := waitOwned(&w.Status), waitOwned(&w.Status)
	p := &waitPass{w: &w, next: &next}
	result, err := r.step(ctx, p)
	if err != nil || p.skip {
		return result, err
	}
	next.NodeName = a.d.NodeName
	next.ConditionStatus = waitStatusFor(next.Conditions)
	next.ObservedGeneration = w.Generation
	nodekit.SetHealth(&next.Conditions, wbv1.WaitHealth(next.ConditionStatus), string(next.ConditionStatus), "wait is "+string(next.ConditionStatus), w.Generation)
	wrote, err := statusapply.Apply(ctx, a.d.Client, nodekit.FieldManager+"wait", &w, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if p.outcome != nil {
		a.mu.Lock()
		delete(a.live, string(w.UID))
		a.mu.Unlock()
		if wrote {
			evType := corev1.EventTypeNormal
			if p.outcome.Status == wbv1.WaitFailed {
				evType = corev1.EventTypeWarning
			}
			a.d.Event(&w, evType, string(p.outcome.Status), "Wait is "+string(p.outcome.Status)+": "+statusapply.Truncate(p.outcome.Message, 256))
		}
	}
	return result, nil
}

// step decides one pass. The store records a wait before the engine holds it; a record
// without a live registration in this process means a previous process held it, and the
// wait ends Failed/interrupted — it is never silently re-registered.
func (r *waitReconciler) step(ctx context.Context, p *waitPass) (ctrl.Result, error) {
	a := r.a
	uid := string(p.w.UID)
	a.mu.Lock()
	lw := a.live[uid]
	var o *waitOutcome
	if lw != nil {
		o = lw.result
	}
	a.mu.Unlock()
	deadline := p.w.CreationTimestamp.Add(time.Duration(p.w.Spec.DeadlineSeconds) * time.Second)
	switch {
	case lw != nil && o != nil:
		p.finish(o)
		return ctrl.Result{}, nil
	case lw != nil:
		if p.w.Spec.DesiredState == wbv1.WaitDesiredCancelled {
			lw.h.Cancel() // the outcome (Cancelled) arrives through awaitWait
		}
		p.pending(lw.started, deadline)
		return ctrl.Result{}, nil
	}
	rec, ok, err := a.d.Store.Waits().Get(uid)
	if err != nil {
		return ctrl.Result{}, err
	}
	if ok {
		if o := decodeWaitOutcome(rec.Reason); o != nil {
			// Recorded before its status was written (or the cache is behind): check the
			// stored object before writing it again.
			var fresh wbv1.Wait
			if err := a.d.Reader.Get(ctx, client.ObjectKeyFromObject(p.w), &fresh); err != nil {
				return ctrl.Result{}, client.IgnoreNotFound(err)
			}
			p.skip = waitIsFinal(&fresh.Status)
			p.finish(o)
			return ctrl.Result{}, nil
		}
		p.fail(string(actuation.CodeInterrupted), "the node agent restarted while the wait was pending ("+rec.Reason+"); a wait is never re-registered: create a new one")
		return ctrl.Result{}, a.persistWait(uid, p.outcome)
	}
	return r.register(ctx, p, deadline)
}

// register resolves the wait's source and hands it to the engine with the agent's
// long-lived context.
func (r *waitReconciler) register(ctx context.Context, p *waitPass, deadline time.Time) (ctrl.Result, error) {
	a := r.a
	w := p.w
	if w.Spec.DesiredState == wbv1.WaitDesiredCancelled {
		p.finish(&waitOutcome{Status: wbv1.WaitCancelled, Message: "cancelled before it was registered"})
		return ctrl.Result{}, nil
	}
	req, err := ConditionRequest(string(w.UID), &w.Spec.Condition)
	if err != nil {
		p.fail(string(actuation.CodeOf(err)), err.Error())
		return ctrl.Result{}, nil
	}
	src, err := a.d.Scope(ctx, w.Namespace, w.Spec.Scope, true)
	switch {
	case errors.Is(err, nodekit.ErrNotYet):
		if !time.Now().Before(deadline) {
			p.finish(&waitOutcome{Status: wbv1.WaitTimedOut, Message: "the deadline passed before the scoped resource became available on this node; nothing was killed"})
			return ctrl.Result{}, nil
		}
		// Woken when its scope becomes available here; the requeue is the deadline.
		return ctrl.Result{RequeueAfter: statusapply.RequeueAt(time.Now(), deadline)}, nil
	case string(actuation.CodeOf(err)) != "":
		p.fail(string(actuation.CodeOf(err)), err.Error())
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	req.Source, req.Deadline = src, deadline
	now := time.Now()
	if err := a.d.Store.Waits().Put(store.Wait{UID: string(w.UID), Namespace: w.Namespace, Name: w.Name,
		Phase: string(wbv1.WaitPending), Deadline: deadline, UpdatedAt: now}); err != nil {
		if rel, ok := src.(Releaser); ok {
			rel.Release()
		}
		return ctrl.Result{}, err
	}
	h, err := a.d.Engine.Register(a.d.Ctx, req)
	if err != nil {
		code := string(actuation.CodeOf(err))
		if code == "" {
			code = string(actuation.CodeSourceFailed)
		}
		p.fail(code, err.Error())
		return ctrl.Result{}, a.persistWait(string(w.UID), p.outcome)
	}
	lw := &liveWait{key: client.ObjectKeyFromObject(w), h: h, started: now}
	a.mu.Lock()
	a.live[string(w.UID)] = lw
	a.mu.Unlock()
	a.d.Pending(a.d.Engine.Pending())
	go a.awaitWait(w.DeepCopy(), lw)
	p.pending(now, deadline)
	return ctrl.Result{}, nil
}

// awaitWait waits for the engine's outcome, persists it and wakes the reconciler to
// write it. When the agent is stopping the record stays live, so the next process
// reports the wait interrupted instead of a Cancelled nobody asked for.
func (a *Room) awaitWait(obj *wbv1.Wait, lw *liveWait) {
	<-lw.h.Done()
	res, _ := lw.h.Result()
	a.d.Pending(a.d.Engine.Pending())
	if a.d.Ctx.Err() != nil {
		return
	}
	o := outcomeOf(obj, res)
	if o.Status == wbv1.WaitSatisfied {
		a.d.Observe(a.d.Ctx, obj.Namespace, obj.Labels[wbv1.EnvironmentLabel], nodekit.ScopeSession(obj.Spec.Scope), skills.EdgeWait,
			obj.Name, string(obj.Spec.Condition.Kind), string(o.Status)) // seed 004
	}
	if err := a.persistWait(string(obj.UID), o); err != nil {
		ctrl.LoggerFrom(a.d.Ctx).Error(err, "Recording wait outcome", "wait", client.ObjectKeyFromObject(obj))
	}
	a.mu.Lock()
	lw.result = o
	a.mu.Unlock()
	nodekit.Wake(a.d.Ctx, a.d.Wake, obj)
}

func outcomeOf(w *wbv1.Wait, res Result) *waitOutcome {
	o := &waitOutcome{
		Status: wbv1.WaitConditionStatus(res.Status), SeqFrom: res.Observation.SeqFrom, SeqTo: res.Observation.SeqTo,
		Digest: res.Observation.Digest, Message: res.Reason, Started: res.Started, DurationMS: res.Duration.Milliseconds(),
	}
	if o.DurationMS == 0 && res.Duration > 0 {
		o.DurationMS = 1
	}
	for _, d := range res.Diagnostics {
		o.Diagnostics = append(o.Diagnostics, string(d))
	}
	if d := res.Observation.Detail; d != "" {
		o.Message += " (" + d + ")"
	}
	if res.Status == StatusFailed {
		switch o.RefusalCode = string(actuation.CodeOf(res.Err)); {
		case o.RefusalCode != "":
		case res.Err != nil:
			o.RefusalCode = string(actuation.CodeSourceFailed)
		case w.Spec.Scope != nil && w.Spec.Scope.SessionRef != nil:
			o.RefusalCode = string(actuation.CodeSessionClosed) // the session ended without the condition
		default:
			o.RefusalCode = string(actuation.CodeConditionUnreachable)
		}
	}
	return o
}

// persistWait records the outcome in the wait's store record (when it has one).
func (a *Room) persistWait(uid string, o *waitOutcome) error {
	rec, ok, err := a.d.Store.Waits().Get(uid)
	if err != nil || !ok {
		return err
	}
	raw, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encoding outcome of wait %s: %w", uid, err)
	}
	rec.Phase, rec.Reason, rec.UpdatedAt = string(o.Status), string(raw), time.Now()
	return a.d.Store.Waits().Put(rec)
}

// forgetWait drops what the agent holds for a deleted Wait: a pending registration is
// cancelled (deleting a wait kills nothing either) and its store record removed.
func (a *Room) forgetWait(key types.NamespacedName) error {
	a.mu.Lock()
	for uid, lw := range a.live {
		if lw.key == key {
			lw.h.Cancel()
			delete(a.live, uid)
		}
	}
	a.mu.Unlock()
	recs, err := a.d.Store.Waits().List(0)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if rec.Namespace == key.Namespace && rec.Name == key.Name {
			if err := a.d.Store.Waits().Delete(rec.UID); err != nil {
				return err
			}
		}
	}
	return nil
}

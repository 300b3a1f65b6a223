package commands

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/runs"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/statusapply"
)

// Outcome is the one recorded outcome, persisted in the store before it is written
// to status, so a crash between the two still reports the truth.
type Outcome struct {
	Phase        wbv1.CommandPhase `json:"phase"`
	ExitCode     *int32            `json:"exitCode,omitempty"`
	SignalOrigin string            `json:"signalOrigin,omitempty"`
	Bytes        int64             `json:"bytes"`
	Truncated    bool              `json:"truncated,omitempty"`
	OutputDigest string            `json:"outputDigest,omitempty"`
	SeqFrom      uint64            `json:"seqFrom,omitempty"`
	SeqTo        uint64            `json:"seqTo,omitempty"`
	RefusalCode  string            `json:"refusalCode,omitempty"`
	Message      string            `json:"message,omitempty"`
	Started      time.Time         `json:"started,omitempty"`
	Completed    time.Time         `json:"completed"`
	// AdmittedBy and AdmittedContext are this node's decision on a command it decided (a
	// refusal after its admission): stored with the outcome, so a crash before the status
	// write still shows the decision with it.
	AdmittedBy      string `json:"admittedBy,omitempty"`
	AdmittedContext string `json:"admittedContext,omitempty"`
}

// commandDecisionGrace is how long after its agent first reported Ready this node waits
// before deciding commands itself: a manager whose cache had not yet seen the node's
// registration (WorkbenchNode.status.agentVersion) may still have decided one of them in
// that window; its decision is read first. After it, the manager never decides a command
// bound to this node (controllers nodeDecides).
const commandDecisionGrace = 2 * time.Second

// Deps is what the TerminalCommand room needs of the node agent: its clients, store, run
// table and runner, and hooks for what belongs to the agent (sessions, roots, shares,
// recordings, capacity, wakes).
type Deps struct {
	// Ctx is the agent's run context (the outcome goroutines log under it; nil: none yet).
	Ctx      context.Context
	NodeName string
	// ConcurrentCommands is the node's cap of commands running at once (guest commands
	// reserve against it; the runner enforces it for host commands).
	ConcurrentCommands int
	Client             client.Client // the node's cache
	Reader             client.Reader // the API server, uncached (profiles, sessions, grants)
	Store              *store.DB
	Runner             *procexec.Runner
	// Table is the commands this process started (the agent's data plane, waits, drain and
	// retention read it too).
	Table *runs.Table[Outcome]
	// Cgroups (nil: none) tells whether a command has its own cgroup, so its PID record may wait.
	Cgroups *cgroups.Manager
	Event   nodekit.EventFunc
	// Wake re-queues a command from a goroutine (its outcome is recorded).
	Wake func(obj client.Object)
	// KickCapacity recomputes the node's free capacity; Finished signals waits that a
	// command's outcome is recorded; Stopping says whether the agent is shutting down.
	KickCapacity func()
	Finished     func()
	Stopping     func() bool
	// Roots returns an environment's mounted roots once it is ready in this process;
	// VerifyRoots re-checks them before a process starts in them.
	Roots       func(envUID string) ([]backends.MountedRoot, bool)
	VerifyRoots func(envUID string, roots []backends.MountedRoot) error
	// SessionRing is an open session's event ring (nil: not open here); SessionEmitter
	// refuses a command its session's emitter does not admit.
	SessionRing    func(sessUID string) *ring.Ring
	SessionEmitter func(ctx context.Context, cmd *wbv1.TerminalCommand, sess *wbv1.TerminalSession) (*actuation.Refusal, error)
	// Executor is env's executor (its backend's port, backends.Env.Exec: the host
	// sandbox or the guest); an error is a refusal with its code.
	Executor func(env *wbv1.Environment) (backends.Executor, error)
	// Limits are the cgroup limits of one process of env; FileSizeLimit its file-size bound.
	Limits        func(env *wbv1.Environment) cgroups.Limits
	FileSizeLimit func(env *wbv1.Environment) int64
	// AcquireShare takes the creator's share of the concurrent-command slots (code set:
	// refused, nothing held).
	AcquireShare func(ctx context.Context, ns, creator string) (release func(), code, msg string)
	// RecordBefore and RecordAfter are the recordings' hooks (state before, outcome after).
	RecordBefore func(ctx context.Context, env *wbv1.Environment, session, objUID string)
	RecordAfter  func(cmd *wbv1.TerminalCommand, envName string, o *Outcome, output []byte)
}

// Room reconciles the TerminalCommands bound to this node: it decides them (admission at
// the node, or a hand-off to the manager), runs them in the host sandbox or the
// environment's guest, and records exactly one outcome per command (the start is stored
// before any process exists; the outcome before status shows it). It imports nothing of
// the agent: Deps is all it sees.
type Room struct {
	d Deps
	// profiles memoizes the CommandProfiles read for fast-path admission (profile_memo.go).
	profiles *profileMemo
	// written is how far this node's own last status write of each command got, until its
	// cache shows it (written.go).
	written *writtenMemo
	// waiters are the commands waiting for a concurrent-command slot (slots.go).
	waiters slotWaiters
	// decideFrom is when this node starts deciding the commands bound to it (set once its
	// WorkbenchNode shows the registration; zero until then).
	mu         sync.Mutex
	decideFrom time.Time
}

// New returns the TerminalCommand room over d.
func New(d Deps) *Room { return &Room{d: d, profiles: newProfileMemo(), written: newWrittenMemo()} }

// Live is a TerminalCommand this process started (internal/nodeagent/runs: the command
// path's one start → record → outcome sequence, shared with the ActionRun room).
type Live = runs.Run[Outcome]

// RecordedPhase is the phase a command's start record carries with its outcome.
func (o Outcome) RecordedPhase() string { return string(o.Phase) }

// decides answers whether this node is now the decider of the commands bound to it, and
// when not, how long until it may be.
func (r *Room) decides(ctx context.Context) (bool, time.Duration, error) {
	r.mu.Lock()
	from := r.decideFrom
	r.mu.Unlock()
	if from.IsZero() {
		var wn wbv1.WorkbenchNode
		if err := r.d.Client.Get(ctx, types.NamespacedName{Name: r.d.NodeName}, &wn); client.IgnoreNotFound(err) != nil {
			return false, 0, err
		}
		ready := meta.FindStatusCondition(wn.Status.Conditions, wbv1.ConditionReady)
		if wn.Status.AgentVersion == "" || ready == nil {
			return false, time.Second, nil // not registered yet: the heartbeat publishes it
		}
		from = ready.LastTransitionTime.Add(commandDecisionGrace)
		r.mu.Lock()
		r.decideFrom = from
		r.mu.Unlock()
	}
	if wait := time.Until(from); wait > 0 {
		return false, wait, nil
	}
	return true, 0, nil
}

// commandOwned is what the node agent writes of a command's status: the run and its
// outcome, nodeName, and — for a command this node decided (status.decidedBy node,
// wbv1.CommandPhaseWriter) — the whole admission record, the phase and the health
// conditions, so the decision, the outcome and the phase a user reads have this one writer
// and arrive together. Of a command the manager decided the node writes the run and the
// outcome only.
func commandOwned(s *wbv1.TerminalCommandStatus) wbv1.TerminalCommandStatus {
	out := wbv1.TerminalCommandStatus{
		ExitCode: s.ExitCode, SignalOrigin: s.SignalOrigin, StdoutBytes: s.StdoutBytes, Truncated: s.Truncated,
		OutputDigest: s.OutputDigest, SeqFrom: s.SeqFrom, SeqTo: s.SeqTo, Refusal: s.Refusal, NodeName: s.NodeName,
		StartTime: s.StartTime, CompletionTime: s.CompletionTime,
		Conditions: statusapply.Owned(s.Conditions, wbv1.ConditionStarted, wbv1.ConditionCompleted),
		// decidedBy is written by whoever decides who decides: this node (node, or manager
		// when it hands a command over) or, for a command bound to no agent, the manager.
		DecidedBy: s.DecidedBy,
	}
	if wbv1.CommandPhaseWriter(s) == wbv1.PhaseWriterNode {
		out.Phase = s.Phase
		out.CommandID, out.ArgvDigest, out.AdmittedBy, out.AdmittedContext = s.CommandID, s.ArgvDigest, s.AdmittedBy, s.AdmittedContext
		out.ObservedGeneration = s.ObservedGeneration
		out.Conditions = append(out.Conditions, statusapply.Owned(s.Conditions, wbv1.ConditionAdmitted, wbv1.ConditionReconciling, wbv1.ConditionStalled)...)
	}
	return out
}

// StatusOwned is commandOwned for callers outside the package: the exact part of a
// command's status the node agent applies (a test playing a stale node writer uses it).
func StatusOwned(s *wbv1.TerminalCommandStatus) wbv1.TerminalCommandStatus {
	return commandOwned(s)
}

// derivePhase returns the phase all derives, and sets it with the health conditions (and the
// generation they follow) on next when this node decided the command (next.decidedBy,
// wbv1.CommandPhaseWriter); of a command the manager decided, the manager writes them.
func derivePhase(next *wbv1.TerminalCommandStatus, all *[]metav1.Condition, generation int64) wbv1.CommandPhase {
	phase := wbv1.CommandPhaseFor(*all)
	if wbv1.CommandPhaseWriter(next) != wbv1.PhaseWriterNode {
		return phase
	}
	next.Phase, next.ObservedGeneration = phase, generation
	for _, hc := range wbv1.HealthConditions(wbv1.CommandHealth(phase), string(phase), "command is "+string(phase), generation) {
		if wbv1.CommandIsFinal(*all) && next.CompletionTime != nil {
			// Final: the transition is the outcome's, so a second pass over the same outcome
			// writes the same status (no stored write).
			hc.LastTransitionTime = *next.CompletionTime
		}
		statusapply.Set(&next.Conditions, all, hc)
	}
	return phase
}

func (r *Room) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	defer r.d.KickCapacity() // what this pass opened or ended changes the free capacity (the agent's free.go)
	defer r.d.Table.Signal() // output?follow waiters look again (dataplane.CommandWatcher)
	var cmd wbv1.TerminalCommand
	if err := r.d.Client.Get(ctx, req.NamespacedName, &cmd); err != nil {
		if client.IgnoreNotFound(err) == nil {
			// Gone (its finalizer released): nothing of it may keep running here.
			r.d.Table.Stop(func(lc *Live) bool { return lc.Key == req.NamespacedName })
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cmd.Labels[wbv1.NodeLabel] != r.d.NodeName {
		return ctrl.Result{}, nil
	}
	markCommand(&cmd, "node-reconcile")
	if cmd.DeletionTimestamp.IsZero() && cmd.Spec.DesiredState != wbv1.CommandDesiredCancelled && r.written.behind(&cmd, time.Now()) {
		// The cache has not yet shown this node's own last write of the command: this pass
		// would only write it again. The watch event of that write brings the next pass.
		return ctrl.Result{}, nil
	}
	// Nobody decided it yet (no decidedBy): this node is its one decider (the manager never
	// decides a command bound to a node with an agent): it admits and runs it, or hands it
	// to the manager (decidedBy manager) for what needs the manager — consent, refusals,
	// holds. Decided by this node (mine): it owns the admission record, the phase and the
	// outcome. Decided by the manager: only what it admitted runs here.
	mine := wbv1.CommandPhaseWriter(&cmd.Status) == wbv1.PhaseWriterNode
	fast := mine || cmd.Status.DecidedBy == "" && meta.FindStatusCondition(cmd.Status.Conditions, wbv1.ConditionAdmitted) == nil
	if !fast && !meta.IsStatusConditionTrue(cmd.Status.Conditions, wbv1.ConditionAdmitted) {
		return ctrl.Result{}, nil
	}
	if fast && !mine {
		if ok, wait, err := r.decides(ctx); err != nil || !ok {
			return ctrl.Result{RequeueAfter: wait}, err
		}
	}
	if wbv1.CommandIsFinal(cmd.Status.Conditions) {
		r.d.Table.Forget(string(cmd.UID)) // status holds the outcome; the store keeps the record
		if mine && cmd.Status.ObservedGeneration != cmd.Generation {
			// A spec change after the outcome (a late cancel raises the generation): the
			// phase and health this node wrote now follow this generation (kstatus).
			cur, next := commandOwned(&cmd.Status), commandOwned(&cmd.Status)
			all := append([]metav1.Condition(nil), cmd.Status.Conditions...)
			derivePhase(&next, &all, cmd.Generation)
			_, err := statusapply.Apply(ctx, r.d.Client, nodekit.FieldManager+"command", &cmd, cur, next)
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, nil
	}
	cur, next := commandOwned(&cmd.Status), commandOwned(&cmd.Status)
	all := append([]metav1.Condition(nil), cmd.Status.Conditions...)
	p := &cmdPass{cmd: &cmd, next: &next, all: &all, fast: fast, claimed: mine}
	if err := r.step(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	if p.fast && !p.claimed && !p.handOff && p.decided != nil && p.admittedBy != "" {
		// Admitted here, then refused on what only this node sees (a cwd, a root, the
		// environment's variables): this node's decision, stored before status shows it, so
		// a crash before the write never lets a later pass decide again and run it.
		p.admitHere(r.d.NodeName, p.admittedBy, p.admittedContext, time.Time{})
		p.decided.AdmittedBy, p.decided.AdmittedContext = p.admittedBy, string(p.admittedContext)
	}
	if p.fast && !p.claimed && (p.handOff || p.decided != nil) {
		// Not admitted here (consent, a refusal, a hold, a cancellation before the start):
		// the manager decides it; one write says so, and it is the manager's from then on.
		return p.result, r.handOff(ctx, &cmd)
	}
	if p.fast && !p.claimed || p.reread {
		// Not decided yet (waiting for its session or environment here), or admitted against
		// a profile that changed before anything started: the next pass decides again.
		return p.result, nil
	}
	if p.fast && !mine && meta.FindStatusCondition(all, wbv1.ConditionStarted) == nil && !wbv1.CommandIsFinal(all) {
		// Admitted here, but nothing to show with the decision yet (the replay of an
		// idempotency key whose owner still runs): the decision is never a write of its
		// own; the requeue decides it again.
		return p.result, nil
	}
	if err := r.storeDecision(&cmd, p.decided); err != nil {
		return ctrl.Result{}, err // stored before it is shown, or not shown (republish.go)
	}
	before, after := cmd.Status.Phase, derivePhase(&next, &all, cmd.Generation)
	markCommand(&cmd, "node-status-apply-"+string(after))
	wrote, err := statusapply.Apply(ctx, r.d.Client, nodekit.FieldManager+"command", &cmd, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote {
		markCommand(&cmd, "node-status-written-"+string(after))
		r.written.note(&cmd, all, time.Now())
	}
	if wbv1.CommandIsFinal(all) {
		r.d.Table.Forget(string(cmd.UID)) // bounded memory: the outcome is in status and in the store
		// The command's whole path is done: top the pre-started sandboxes up now (only if
		// no other command is starting), not during its teardown, outcome or status write.
		r.d.Runner.Refill()
	}
	if wrote && before != after && after != wbv1.CommandRunning && after != wbv1.CommandSucceeded {
		// A Warning Event for what a person must look at (refused, failed, timed out,
		// cancelled). Running and Succeeded get none: status already says so, and an Event
		// per command is one more API write and etcd object per command on the hot path
		// (issue 27; docs/scale.md section 1).
		r.d.Event(&cmd, corev1.EventTypeWarning, string(after), fmt.Sprintf("Command is %s on node %s", after, r.d.NodeName))
	}
	return p.result, nil
}

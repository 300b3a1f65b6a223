package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/convert"
	"sensorium.dev/workbench/internal/nodeagent/runs"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/platform/spans"
	"sensorium.dev/workbench/internal/statusapply"
)

// commandOutcome is the one recorded outcome, persisted in the store before it is written
// to status, so a crash between the two still reports the truth.
type commandOutcome struct {
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

type commandReconciler struct {
	a *Agent
	// decideFrom is when this node starts deciding the commands bound to it (set once its
	// WorkbenchNode shows the registration; zero until then).
	mu         sync.Mutex
	decideFrom time.Time
}

// decides answers whether this node is now the decider of the commands bound to it, and
// when not, how long until it may be.
func (r *commandReconciler) decides(ctx context.Context) (bool, time.Duration, error) {
	r.mu.Lock()
	from := r.decideFrom
	r.mu.Unlock()
	if from.IsZero() {
		var wn wbv1.WorkbenchNode
		if err := r.a.client.Get(ctx, types.NamespacedName{Name: r.a.cfg.NodeName}, &wn); client.IgnoreNotFound(err) != nil {
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

// CommandStatusOwned is commandOwned for callers outside the package: the exact part of a
// command's status the node agent applies (a test playing a stale node writer uses it).
func CommandStatusOwned(s *wbv1.TerminalCommandStatus) wbv1.TerminalCommandStatus {
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
		statusapply.Set(&next.Conditions, all, hc)
	}
	return phase
}

func (r *commandReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.a
	defer a.kickCapacity()    // what this pass opened or ended changes the free capacity (free.go)
	defer a.commandsChanged() // output?follow waiters look again (dataplane.CommandWatcher)
	var cmd wbv1.TerminalCommand
	if err := a.client.Get(ctx, req.NamespacedName, &cmd); err != nil {
		if client.IgnoreNotFound(err) == nil {
			// Gone (its finalizer released): nothing of it may keep running here.
			a.stopCommands(func(lc *liveCommand) bool { return lc.Key == req.NamespacedName })
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cmd.Labels[wbv1.NodeLabel] != a.cfg.NodeName {
		return ctrl.Result{}, nil
	}
	markCommand(&cmd, "node-reconcile")
	// Nobody decided it yet (no decidedBy): this node is its one decider (the manager never
	// decides a command bound to a node with an agent): it admits and runs it, or hands it
	// to the manager (decidedBy manager) for what needs the manager — consent, refusals,
	// holds. Decided by this node (mine): it owns the admission record, the phase and the
	// outcome. Decided by the manager: only what it admitted runs here.
	mine := wbv1.CommandPhaseWriter(&cmd.Status) == wbv1.PhaseWriterNode
	fast := mine || cmd.Status.DecidedBy == "" && meta.FindStatusCondition(cmd.Status.Conditions, wbv1.ConditionAdmitted) == nil
	if !fast && !condTrue(cmd.Status.Conditions, wbv1.ConditionAdmitted) {
		return ctrl.Result{}, nil
	}
	if fast && !mine {
		if ok, wait, err := r.decides(ctx); err != nil || !ok {
			return ctrl.Result{RequeueAfter: wait}, err
		}
	}
	if wbv1.CommandIsFinal(cmd.Status.Conditions) {
		a.forgetCommand(string(cmd.UID)) // status holds the outcome; the store keeps the record
		if mine && cmd.Status.ObservedGeneration != cmd.Generation {
			// A spec change after the outcome (a late cancel raises the generation): the
			// phase and health this node wrote now follow this generation (kstatus).
			cur, next := commandOwned(&cmd.Status), commandOwned(&cmd.Status)
			all := append([]metav1.Condition(nil), cmd.Status.Conditions...)
			derivePhase(&next, &all, cmd.Generation)
			_, err := statusapply.Apply(ctx, a.client, FieldManager+"command", &cmd, cur, next)
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
		p.admitHere(a.cfg.NodeName, p.admittedBy, p.admittedContext)
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
	if err := a.storeDecision(&cmd, p.decided); err != nil {
		return ctrl.Result{}, err // stored before it is shown, or not shown (republish.go)
	}
	before, after := cmd.Status.Phase, derivePhase(&next, &all, cmd.Generation)
	markCommand(&cmd, "node-status-apply-"+string(after))
	wrote, err := statusapply.Apply(ctx, a.client, FieldManager+"command", &cmd, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote {
		markCommand(&cmd, "node-status-written-"+string(after))
	}
	if wbv1.CommandIsFinal(all) {
		a.forgetCommand(string(cmd.UID)) // bounded memory: the outcome is in status and in the store
		// The command's whole path is done: top the pre-started sandboxes up now (only if
		// no other command is starting), not during its teardown, outcome or status write.
		a.runner.Refill()
	}
	if wrote && before != after {
		evType := corev1.EventTypeNormal
		if after != wbv1.CommandRunning && after != wbv1.CommandSucceeded {
			evType = corev1.EventTypeWarning
		}
		a.recordEvent(&cmd, evType, string(after), fmt.Sprintf("Command is %s on node %s", after, a.cfg.NodeName))
	}
	return p.result, nil
}

type cmdPass struct {
	cmd    *wbv1.TerminalCommand
	next   *wbv1.TerminalCommandStatus
	all    *[]metav1.Condition
	result ctrl.Result
	// fast: the manager has not decided the command; claimed: this node decided it
	// (status.decidedBy node, or this pass admitted it: admitHere). A fast pass that has
	// not claimed writes nothing but a hand-off (handOff) to the manager.
	fast, claimed bool
	// handOff: this pass leaves the decision to the manager (status.decidedBy manager).
	handOff bool
	// admittedBy is who admitted the command at this node (a fast pass).
	admittedBy string
	// decided is an outcome this pass decided with no start record (a refusal, a
	// cancellation before the start): it is stored before status shows it (storeDecision).
	decided *commandOutcome
	// reread: the profile changed since the memo's read this pass admitted against
	// (claimCurrent); the pass started nothing and writes nothing more.
	reread bool
	// fresh is the profile as read again when it differed from the memo (nil: gone).
	fresh *wbv1.CommandProfile
	// admittedContext is the environment's operational context a fast pass admitted under.
	admittedContext wbv1.ContextClass
}

// decide ends the command with an outcome decided at the node, nothing started.
func (p *cmdPass) decide(o *commandOutcome) {
	if p.claimed && p.fast {
		o.AdmittedBy, o.AdmittedContext = p.admittedBy, string(p.admittedContext)
	}
	p.decided = o
	p.finish(o)
}

// admitHere records this node's decision in the pass's status: status.decidedBy node,
// Admitted=True with who admitted it, the command's identity, its argv digest and the
// operational context it was admitted under. It is written with the start (a command
// still running after runs.CoalesceWindow) or with the outcome — one status write for a short
// command — never alone: no other component decides a command bound to this node, so
// there is no claim to stake first. From it on this node is the one writer of the
// command's admission record, phase and outcome (wbv1.CommandPhaseWriter).
func (p *cmdPass) admitHere(node, by string, context wbv1.ContextClass) {
	if by == "" {
		by = actuation.AdmittedByProfile
	}
	cmd := p.cmd
	p.claimed, p.admittedBy, p.admittedContext = true, by, context
	p.next.NodeName, p.next.DecidedBy = node, wbv1.PhaseWriterNode
	p.next.CommandID, p.next.ArgvDigest = string(cmd.UID), wbv1.Digest(argvDigestOf(cmd))
	p.next.AdmittedBy, p.next.AdmittedContext = by, context
	reason := wbv1.ReasonAdmittedByProfile
	if by != actuation.AdmittedByProfile {
		reason = wbv1.ReasonAdmittedByConsent
	}
	p.set(wbv1.ConditionAdmitted, true, reason, "admitted at node "+node+" by "+by+" under operational context "+string(context)+" (fast path)")
}

// handOff leaves a command this node does not admit itself to the manager: one write of
// status.decidedBy manager (set once, never changed), after which the manager's gate is
// the one writer of its admission record and phase (consent, refusals, holds) and this
// node runs it only once the manager admitted it.
func (r *commandReconciler) handOff(ctx context.Context, cmd *wbv1.TerminalCommand) error {
	cur, next := commandOwned(&cmd.Status), commandOwned(&cmd.Status)
	next.DecidedBy = wbv1.PhaseWriterManager
	wrote, err := statusapply.Apply(ctx, r.a.client, FieldManager+"command", cmd, cur, next)
	if wrote {
		markCommand(cmd, "node-handed-off")
	}
	return err
}

func (p *cmdPass) set(t string, ok bool, reason, msg string) {
	statusapply.Set(&p.next.Conditions, p.all, statusapply.Cond(t, ok, reason, msg, p.cmd.Generation))
}

// finish records the outcome in status. Every field this agent owns is set again, so a
// pass that read a stale copy never drops what an earlier pass wrote.
func (p *cmdPass) finish(o *commandOutcome) {
	if !o.Started.IsZero() {
		p.next.StartTime = &metav1.Time{Time: o.Started}
		p.set(wbv1.ConditionStarted, true, "Started", "the process was started on this node")
	}
	p.next.ExitCode = o.ExitCode
	p.next.SignalOrigin = wbv1.SignalOrigin(o.SignalOrigin)
	p.next.StdoutBytes, p.next.Truncated = o.Bytes, o.Truncated
	p.next.OutputDigest = wbv1.Digest(o.OutputDigest)
	p.next.SeqFrom, p.next.SeqTo = int64(o.SeqFrom), int64(o.SeqTo)
	p.next.CompletionTime = &metav1.Time{Time: o.Completed}
	if o.RefusalCode != "" {
		p.next.Refusal = &wbv1.Refusal{Code: o.RefusalCode, Message: statusapply.Truncate(o.Message, 1024)}
	}
	p.set(wbv1.ConditionCompleted, true, string(o.Phase), statusapply.Truncate(o.Message, 1024))
}

// step decides one pass. The order matters for exactly-once: the store records the start
// before any process exists; a record without a live handle in this process means a
// previous process started it, and the command ends Failed/interrupted — never re-run.
func (r *commandReconciler) step(ctx context.Context, p *cmdPass) error {
	a := r.a
	uid := string(p.cmd.UID)
	deleting := !p.cmd.DeletionTimestamp.IsZero() || p.cmd.Spec.DesiredState == wbv1.CommandDesiredCancelled
	if p.fast && !p.claimed {
		// A start record (or a stored decision) of a command whose status names no decider:
		// this node decided it and ran (or refused) it, and the pass that would have written
		// that crashed or failed to write. The decision is the one recorded with it.
		rec, ok, err := a.commands.Stored(uid)
		if err != nil {
			return err
		}
		if ok {
			by, context := rec.AdmittedBy, rec.AdmittedContext
			if o := runs.Decode[commandOutcome](rec.Outcome); by == "" && o != nil {
				by, context = o.AdmittedBy, o.AdmittedContext
			}
			p.admitHere(a.cfg.NodeName, by, wbv1.ContextClass(context))
		}
	}
	live, result, err := a.commands.Settle(uid)
	if err != nil {
		return err
	}
	p.next.NodeName = a.cfg.NodeName
	if live != nil {
		if result != nil {
			p.finish(result)
		} else {
			if deleting {
				a.commands.Stop(func(lc *liveCommand) bool { return lc == live })
				p.result.RequeueAfter = time.Second // the awaiting goroutine also wakes this command
			}
			p.next.StartTime = &metav1.Time{Time: live.Started}
			if !condTrue(*p.all, wbv1.ConditionStarted) {
				// Only when status does not show the start yet: the start pass's message
				// (with the pid) stands, and a wake of a running command writes nothing.
				p.set(wbv1.ConditionStarted, true, "Started", "the process runs on this node")
			}
		}
		return nil
	}
	rec, ok, err := a.commands.Stored(uid)
	if err != nil {
		return err
	}
	if ok {
		o, err := a.commands.OutcomeOf(rec, func() *commandOutcome {
			return &commandOutcome{Phase: wbv1.CommandFailed, RefusalCode: string(actuation.CodeInterrupted), Completed: time.Now(),
				Message: "interrupted: the node agent restarted while the command ran; it is never re-run (" + rec.Outcome + ")"}
		})
		if err != nil {
			return err
		}
		p.finish(o)
		return nil
	}
	if deleting && p.fast && !p.claimed {
		p.handOff = true // not admitted by anyone yet: the manager records the cancellation
		return nil
	}
	if deleting {
		// Deleted before it started here: it never runs.
		p.decide(&commandOutcome{Phase: wbv1.CommandCancelled, SignalOrigin: string(procexec.OriginCancel), Completed: time.Now(),
			Message: "cancelled (deleted or desiredState Cancelled) before it started"})
		return nil
	}
	return r.start(ctx, p)
}

// stopCommands stops every running command match selects (deletion, drain) and marks it
// stopping, so its end is recorded Cancelled.
func (a *Agent) stopCommands(match func(*liveCommand) bool) []*liveCommand {
	return a.commands.Stop(match)
}

// commandDrained says whether a node drain stopped the command.
func (a *Agent) commandDrained(uid string) bool {
	drained := false
	a.commands.View(func(runs map[string]*liveCommand) {
		lc := runs[uid]
		drained = lc != nil && lc.Drained
	})
	return drained
}

// forgetCommand drops a finished command from memory once its outcome is stored.
func (a *Agent) forgetCommand(uid string) { a.commands.Forget(uid) }

// refuse ends a command at the node with a code (nothing was started).
func (p *cmdPass) refuse(code, msg string) {
	p.decide(&commandOutcome{Phase: wbv1.CommandRefused, RefusalCode: code, Message: code + ": " + msg, Completed: time.Now()})
}

func (r *commandReconciler) start(ctx context.Context, p *cmdPass) error {
	a := r.a
	cmd := p.cmd
	var sess wbv1.TerminalSession
	key := types.NamespacedName{Namespace: cmd.Namespace, Name: string(cmd.Spec.SessionRef)}
	if err := a.client.Get(ctx, key, &sess); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		// Not in this node's cache: either not bound to the node yet (the manager binds
		// sessions and commands independently) or gone. Ask the API server once.
		if err := a.reader.Get(ctx, key, &sess); client.IgnoreNotFound(err) != nil {
			return err
		} else if err != nil {
			p.refuse(string(actuation.CodeSessionMissing), "session "+key.Name+" does not exist")
			return nil
		}
		if l := sess.Labels[wbv1.NodeLabel]; l != "" && l != a.cfg.NodeName {
			p.refuse(string(actuation.CodeSessionMissing), "session "+key.Name+" is bound to node "+l)
			return nil
		}
		return nil // binding the session to this node brings it into the cache: its event wakes the command
	}
	if isFinalSessionPhase(string(sess.Status.Phase)) {
		p.refuse(string(actuation.CodeSessionClosed), "session "+sess.Name+" is "+string(sess.Status.Phase))
		return nil
	}
	if ref, err := a.sessionEmitter(ctx, cmd, &sess); err != nil { // internal/nodeagent/sessions/emitter.go
		return err
	} else if ref != nil {
		p.refuse(string(ref.Code), ref.Message)
		return nil
	}
	var env wbv1.Environment
	if err := a.client.Get(ctx, types.NamespacedName{Namespace: cmd.Namespace, Name: string(sess.Spec.EnvironmentRef)}, &env); err != nil {
		return client.IgnoreNotFound(err)
	}
	if env.Status.NodeName != a.cfg.NodeName {
		return nil // not ours (yet); the label said so, the status does not agree
	}
	if code, msg := pausedRefusal(&env); code != "" { // environments/pause.go
		p.refuse(code, msg)
		return nil
	}
	roots, ready := a.mountedRoots(string(env.UID))
	if !ready {
		return nil // environmentAvailable wakes the command once the environment is mounted here
	}
	live := a.sessionRing(string(sess.UID))
	if live == nil {
		return nil // sessionAvailable wakes the command once the session is open here
	}
	// The effective profile: on a fast pass not yet claimed, the node's memo of its last read
	// (profile_memo.go) when it is recent — then the claim re-reads it from the API server and
	// nothing starts unless that read is the version admitted against (claimCurrent);
	// otherwise read from the API server now.
	pkey := types.NamespacedName{Namespace: cmd.Namespace, Name: string(cmd.Spec.ProfileRef)}
	prof := (*wbv1.CommandProfile)(nil)
	if p.fast && !p.claimed {
		prof = a.profiles.get(pkey, time.Now())
	}
	memo := prof != nil
	if !memo {
		prof = &wbv1.CommandProfile{}
		if err := a.reader.Get(ctx, pkey, prof); err != nil {
			if client.IgnoreNotFound(err) == nil {
				a.profiles.drop(pkey)
				p.refuse(string(actuation.CodeProfileMissing), "profile "+string(cmd.Spec.ProfileRef)+" no longer exists")
				return nil
			}
			return fmt.Errorf("reading CommandProfile %s of command %s/%s: %w", pkey.Name, cmd.Namespace, cmd.Name, err)
		}
		a.profiles.put(prof, time.Now())
	}
	core, intent := convert.Profile(&prof.Spec), convert.Intent(&cmd.Spec)
	claimBy := ""
	if p.fast {
		// One hop: this node decides admission itself with the actuation core against the
		// effective profile it just read; only what the profile or a remembered grant bound
		// to this environment admits is taken here (allow-once consent, holds and refusals
		// stay the manager's).
		by, ok := fastPathAdmit(cmd, prof, &env, a.liveGrant(ctx, cmd.Namespace))
		if !ok && p.claimed {
			// Claimed by an earlier pass that started nothing (the store has no record),
			// and the profile no longer admits it: this node owns its outcome now.
			p.refuse(string(actuation.CodeArgvNotAdmitted), "the effective profile "+prof.Name+" no longer admits this argv at the node")
			return nil
		}
		if !ok {
			p.handOff = true // consent, a refusal or a hold: the manager's to decide
			return nil
		}
		claimBy = by
		p.admittedBy, p.admittedContext = by, env.Status.EffectiveOperationalContext
		markCommand(cmd, "node-admitted")
	} else if actuation.CheckAdmissionContext(actuation.ContextClass(cmd.Status.AdmittedContext), actuation.ContextClass(env.Status.EffectiveOperationalContext)) != nil {
		// Admitted under an earlier operational context of the environment: not started
		// under the new one; the manager re-evaluates it and its status write wakes this.
		return nil
	} else if ref := admitAtNode(cmd, prof, &env, a.liveGrant(ctx, cmd.Namespace)); ref != nil {
		// Defence in depth: admission again, at the edge, against the effective profile.
		p.refuse(string(ref.Code), ref.Message)
		return nil
	}
	envVars, ref := actuation.CuratedEnv(core, intent.Env)
	if ref != nil {
		p.refuse(string(ref.Code), ref.Message)
		return nil
	}
	envVars = gitPinnedEnv(core.Executable, resolveExecutable(core.Executable), envVars)
	claim := func() (bool, error) { return r.claim(ctx, p, claimBy) }
	if memo {
		claim = func() (bool, error) { return r.claimCurrent(ctx, p, claimBy, prof.ResourceVersion) }
	}
	if g := a.guestEnvOf(&env); g != nil {
		gc, ref := g.Command(roots, intent, envVars)
		if ref != nil {
			p.refuse(string(ref.Code), ref.Message)
			return nil
		}
		if claimed, err := claim(); !claimed || err != nil {
			if err == nil {
				r.staleMemo(ctx, p, &env)
			}
			return err
		}
		a.recordBefore(ctx, &env, sess.Name, string(cmd.UID)) // seed 004: state before, when recorded
		return r.startGuest(p, g, string(env.UID), string(sess.UID), gc, live)
	}
	if err := a.verifyRoots(string(env.UID), roots); err != nil {
		p.refuse(codeOf(err), err.Error())
		return nil
	}
	// The program the node starts is the symlink-resolved one: classify it again.
	if ref := actuation.CheckResolvedExecutable(core, resolveExecutable(intent.Argv[0]), intent.Argv); ref != nil {
		p.refuse(string(ref.Code), ref.Message)
		return nil
	}
	spec, code, msg := commandSpec(roots, core.AllowedRoots, intent, envVars)
	if code != "" {
		p.refuse(code, msg)
		return nil
	}
	spec.GitMetadataWritable = core.GitMetadataWritable()
	spec.Resources, spec.CgroupID = environmentLimits(&env), string(cmd.UID)
	spec.FileSizeLimit = a.fileSizeLimit(&env) // storage.go: EFBIG past it
	if spans.Enabled() {
		spec.Trace = spans.Marker(cmd.Namespace + "/" + cmd.Name)
	}
	// The claim (an API write) and the store's start record (an fsync) are independent:
	// both must hold before the program runs, neither needs the other — and neither needs
	// the sandbox, which is set up meanwhile (launch: the program is exec'd only once both
	// landed; a helper that never gets the go-ahead ends without running anything, also
	// when this process dies).
	// The creator's share of the node's concurrent-command slots (shares.go), held until
	// the process ended: one identity cannot take every slot.
	release, code, msg := a.acquireShare(ctx, a.shares.commands, commandCapName, actuation.CodeCommandCapReached, cmd.Namespace, cmd.Spec.CreatedBy)
	if code != "" {
		p.refuse(code, msg)
		return nil
	}
	seqFrom := live.LastSeq() + 1 // the data plane's output stream starts here
	out := &liveOutput{rg: live}
	spec.OnOutput = out.write
	lc := &liveCommand{Key: client.ObjectKeyFromObject(cmd), EnvUID: string(env.UID), Finished: make(chan struct{}),
		Out: live, SeqFrom: seqFrom}
	h, o, late, proceed, err := a.commands.Launch(a.runner, runs.LaunchSpec[commandOutcome]{
		UID: string(cmd.UID), Spec: spec, Running: string(wbv1.CommandRunning), Live: lc,
		// p is the recording goroutine's until launch returns.
		Record: func() (store.Command, bool, error) {
			return a.recordStart(p, string(sess.UID), claim)
		},
		Ready: func() {
			markCommand(cmd, "node-claimed-and-recorded")
			a.recordBefore(ctx, &env, sess.Name, string(cmd.UID)) // seed 004: state before, when recorded
		},
		StartFailed: commandStartFailed,
		PIDDelay:    a.cgroups != nil && a.cgroups.Available(),
		PIDRecorded: func(err error) { a.pidRecorded(cmd, err) },
	})
	if err != nil || !proceed {
		release()
		if err == nil {
			r.staleMemo(ctx, p, &env)
		}
		return err // nothing ran: a refusal, a replay, or a stale memo (see recordStart)
	}
	if o != nil {
		release()
		p.finish(o)
		return nil
	}
	go func() {
		<-h.Done()
		release()
	}()
	go a.awaitCommand(cmd.DeepCopy(), h, out, lc.Started)
	if late {
		// Started after shutdown took its list (a pass outliving the manager's graceful
		// stop): nothing of it may outlive the agent, so this pass stops it and waits.
		h.Kill(procexec.OriginCancel)
		<-h.Done()
		return nil
	}
	now := metav1.NewTime(lc.Started)
	p.next.StartTime, p.next.NodeName = &now, a.cfg.NodeName
	p.set(wbv1.ConditionStarted, true, "Started", fmt.Sprintf("pid %d in its own process group, no network, writes confined to the environment", h.Info().Pid))
	// A short command often ends before this pass writes: then one status write records
	// both its start and its outcome.
	if o := a.commands.Coalesce(lc); o != nil {
		markCommand(cmd, "node-coalesced")
		p.finish(o)
	}
	return nil
}

// pidRecorded marks (or logs the failure of) a running command's PID record, written off
// the pass (runs.Table.recordPID). A store failure is only logged: the outcome's own commit,
// which status waits for, reports its failures.
func (a *Agent) pidRecorded(cmd *wbv1.TerminalCommand, err error) {
	if err != nil {
		if a.runCtx != nil {
			ctrl.LoggerFrom(a.runCtx).Error(err, "Storing the PID record of a running command; recovery relies on its cgroup", "command", cmd.Namespace+"/"+cmd.Name)
		}
		return
	}
	markCommand(cmd, "node-pid-recorded")
}

// commandStartFailed is the outcome of a command the runner did not start: Refused with
// the runner's code at a cap, else Failed (start-failed).
func commandStartFailed(err error) *commandOutcome {
	o := &commandOutcome{Phase: wbv1.CommandRefused, Message: err.Error(), Completed: time.Now()}
	if refused, code := runs.StartRefusal(err); refused {
		o.RefusalCode = code
	} else {
		o.Phase, o.RefusalCode = wbv1.CommandFailed, code
	}
	return o
}

// claim takes the decision on a command this node admitted on a pass that has not decided
// it yet: admitHere, in memory — the decision reaches status with the start or the outcome
// (no write of its own: the manager never decides a command bound to this node, so there
// is nothing to win). Outside the fast path (the manager decided) there is nothing to take.
func (r *commandReconciler) claim(_ context.Context, p *cmdPass, by string) (bool, error) {
	if !p.fast || p.claimed {
		return true, nil
	}
	p.admitHere(r.a.cfg.NodeName, by, p.admittedContext)
	markCommand(p.cmd, "node-claim-taken")
	return true, nil
}

// claimCurrent is claim for a pass that admitted the command against the node's memo of its
// profile: the profile is read again from the API server while the start record is
// written, and the pass proceeds only when that read is the version admitted against — so what the node
// starts is always admitted by the current profile. A profile changed (or gone) since the
// memo's read: the pass starts nothing and writes nothing (p.reread; the start record is
// removed again) and the next pass, woken by the requeue, decides against the current
// profile.
func (r *commandReconciler) claimCurrent(ctx context.Context, p *cmdPass, by, admittedRV string) (bool, error) {
	a := r.a
	key := types.NamespacedName{Namespace: p.cmd.Namespace, Name: string(p.cmd.Spec.ProfileRef)}
	type read struct {
		prof *wbv1.CommandProfile
		err  error
	}
	got := make(chan read, 1)
	go func() {
		var prof wbv1.CommandProfile
		err := a.reader.Get(ctx, key, &prof)
		got <- read{&prof, err}
	}()
	claimed, err := r.claim(ctx, p, by)
	cur := <-got
	markCommand(p.cmd, "node-profile-reread")
	switch {
	case cur.err == nil:
		a.profiles.put(cur.prof, time.Now())
	case apierrors.IsNotFound(cur.err):
		a.profiles.drop(key)
	}
	if !claimed || err != nil {
		return claimed, err
	}
	if cur.err != nil && !apierrors.IsNotFound(cur.err) {
		return false, fmt.Errorf("reading CommandProfile %s of command %s/%s again: %w", key.Name, p.cmd.Namespace, p.cmd.Name, cur.err)
	}
	if cur.err != nil || cur.prof.ResourceVersion != admittedRV {
		markCommand(p.cmd, "node-profile-changed")
		p.reread, p.fresh = true, nil
		if cur.err == nil {
			p.fresh = cur.prof
		}
		p.result.Requeue = true //nolint:staticcheck // SA1019: a rate-limited requeue; the claim's own event wakes it too
		return false, nil
	}
	return true, nil
}

// staleMemo decides a command this pass admitted against the node's memo of its profile
// when the profile read again differs (p.reread): nothing started, and this node, which
// took the decision, decides again against the profile just read — refused when it no
// longer admits the command (or is gone), else left to the next pass (requeued).
func (r *commandReconciler) staleMemo(ctx context.Context, p *cmdPass, env *wbv1.Environment) {
	if !p.reread {
		return
	}
	if p.fresh == nil {
		p.reread = false
		p.refuse(string(actuation.CodeProfileMissing), "profile "+string(p.cmd.Spec.ProfileRef)+" no longer exists")
		return
	}
	if _, ok := fastPathAdmit(p.cmd, p.fresh, env, r.a.liveGrant(ctx, p.cmd.Namespace)); !ok {
		p.reread = false
		p.refuse(string(actuation.CodeArgvNotAdmitted), "the effective profile "+p.fresh.Name+" no longer admits this argv at the node")
	}
}

// recordStart records a command's start durably before any process exists — the rule that
// makes re-reconciling never run a command twice. proceed is false when the pass already
// has its outcome: a refusal, or the replay of the command that holds the same idempotency
// key (or a requeue while that one still runs).
//
// claim, when set, runs while the record is written (the fast path's claim): when it does
// not succeed, a record this call created is removed again — no process exists for it — and
// nothing proceeds.
func (a *Agent) recordStart(p *cmdPass, sessUID string, claim func() (bool, error)) (rec store.Command, proceed bool, err error) {
	cmd := p.cmd
	type stored struct {
		rec     store.Command
		created bool
		err     error
	}
	done := make(chan stored, 1)
	go func() {
		rec, created, err := a.store.RecordCommandStart(store.Command{
			UID: string(cmd.UID), Namespace: cmd.Namespace, Name: cmd.Name, SessionUID: sessUID,
			IdempotencyKey: cmd.Spec.IdempotencyKey, ArgvDigest: argvDigestOf(cmd),
			AdmittedBy: p.admittedBy, AdmittedContext: string(p.admittedContext),
		})
		markCommand(cmd, "node-start-record-stored")
		done <- stored{rec, created, err}
	}()
	claimed, claimErr := true, error(nil)
	if claim != nil {
		claimed, claimErr = claim()
	}
	st := <-done
	rec, created, err := st.rec, st.created, st.err
	if !claimed || claimErr != nil {
		if err == nil && created {
			if derr := a.store.Commands().Delete(rec.UID); derr != nil {
				return rec, false, errors.Join(claimErr, fmt.Errorf("removing the start record of unclaimed command %s: %w", cmd.Name, derr))
			}
		}
		return rec, false, claimErr
	}
	if err != nil {
		if code := string(actuation.CodeOf(err)); code != "" {
			p.refuse(code, err.Error())
			return rec, false, nil
		}
		return rec, false, err
	}
	if !created {
		if o := runs.Decode[commandOutcome](rec.Outcome); o != nil {
			o.Message = fmt.Sprintf("replay of %s (idempotency key %q): %s", rec.Name, cmd.Spec.IdempotencyKey, o.Message)
			p.finish(o)
		} else {
			p.result.RequeueAfter = time.Second
		}
		return rec, false, nil
	}
	return rec, true, nil
}

// commandSpec resolves the working directory beneath its root (openat2, so no symlink
// escapes) and builds the sandboxed process spec. Only the profile's allowedRoots are
// mounted in the sandbox (writable when the environment's root is); the environment's
// other roots are not visible to the command at all.
func commandSpec(roots []backends.MountedRoot, allowed []string, in actuation.CommandIntent, envVars []actuation.EnvVar) (procexec.Spec, string, string) {
	var rootPath string
	var writable, readable []string
	for _, r := range roots {
		if !slices.Contains(allowed, r.Name) {
			continue
		}
		if r.Name == in.Cwd.Root {
			rootPath = r.Path
		}
		if r.ReadOnly {
			readable = append(readable, r.Path)
		} else {
			writable = append(writable, r.Path)
		}
	}
	if rootPath == "" {
		return procexec.Spec{}, string(actuation.CodeRootNotAllowed), "root " + in.Cwd.Root + " is not a root of the environment"
	}
	dir := rootPath
	if in.Cwd.Path != "" {
		root, err := fsaccess.OpenRoot(rootPath)
		if err != nil {
			return procexec.Spec{}, string(actuation.CodeRootInvalid), err.Error()
		}
		fi, err := root.Lstat(in.Cwd.Path)
		_ = root.Close()
		if err != nil {
			code := string(actuation.CodeOf(err))
			if code == "" {
				code = string(actuation.CodeCwdNotAllowed)
			}
			return procexec.Spec{}, code, err.Error()
		}
		if fi.Type != fsaccess.TypeDir {
			return procexec.Spec{}, string(actuation.CodeCwdNotAllowed), "cwd " + in.Cwd.Path + " is not a directory"
		}
		dir = filepath.Join(rootPath, in.Cwd.Path)
	}
	env := make([]string, 0, len(envVars))
	for _, e := range envVars {
		env = append(env, e.Name+"="+e.Value)
	}
	return procexec.Spec{
		Argv: in.Argv, Env: env, Dir: dir, Timeout: time.Duration(in.TimeoutSeconds) * time.Second,
		OutputBytes: in.OutputBytes, Network: procexec.NetworkNone, WritableRoots: writable, ReadableRoots: readable,
		TempDirEnv: "TMPDIR",
	}, "", ""
}

// awaitCommand waits for the process, appends its output to the session's event ring,
// persists the outcome, and wakes the reconciler to write it.
func (a *Agent) awaitCommand(cmd *wbv1.TerminalCommand, h *procexec.Handle, out *liveOutput, started time.Time) {
	res, err := h.Wait()
	o := &commandOutcome{Started: started, Completed: time.Now(), Bytes: res.OutputBytesSeen, Truncated: res.Truncated, SignalOrigin: string(res.SignalOrigin)}
	sum := sha256.Sum256(res.Output)
	o.OutputDigest = "sha256:" + hex.EncodeToString(sum[:])
	o.SeqFrom, o.SeqTo = out.bounds() // the output reached the ring while the command ran
	switch {
	case err != nil:
		o.Phase, o.RefusalCode, o.Message = wbv1.CommandFailed, string(actuation.CodeOf(err)), err.Error()
	case res.SignalOrigin == procexec.OriginTimeout:
		o.Phase, o.Message = wbv1.CommandTimedOut, "timed out; the process group was terminated"
	case res.SignalOrigin == procexec.OriginCancel && a.commandDrained(string(cmd.UID)):
		o.Phase, o.RefusalCode, o.SignalOrigin = wbv1.CommandFailed, string(actuation.CodeInterrupted), ""
		o.Message = "interrupted: node " + a.cfg.NodeName + " was drained (cordoned) while the command ran"
	case res.SignalOrigin == procexec.OriginCancel && a.stopping.Load():
		// Killed because the node agent is stopping (e.g. its pod was deleted): nobody
		// cancelled it, and it will not be re-run — the truthful outcome is interrupted.
		o.Phase, o.RefusalCode, o.SignalOrigin = wbv1.CommandFailed, string(actuation.CodeInterrupted), ""
		o.Message = "interrupted: the node agent stopped while the command ran"
	case res.SignalOrigin == procexec.OriginCancel || res.SignalOrigin == procexec.OriginOperator:
		o.Phase, o.Message = wbv1.CommandCancelled, "cancelled ("+string(res.SignalOrigin)+")"
	case res.ExitCode == 0:
		o.Phase, o.Message = wbv1.CommandSucceeded, "exited 0"
	default:
		o.Phase, o.Message = wbv1.CommandFailed, fmt.Sprintf("exited %d %s", res.ExitCode, res.Signal)
	}
	if res.Signal == "" || res.SignalOrigin == procexec.OriginExit {
		code := int32(res.ExitCode)
		o.ExitCode = &code
	}
	if s := res.Cgroup.Summary(); s != "" {
		o.Message += "; " + s // what the cgroup teardown found, limits that were hit
	}
	if !res.CleanupComplete && err == nil {
		o.Message += "; cleanup incomplete: processes of the group may remain"
	}
	markCommand(cmd, "node-command-ended")
	a.recordAfterCommand(cmd, cmd.Labels[wbv1.EnvironmentLabel], o, res.Output) // seed 004
	a.recordOutcome(string(cmd.UID), o)
	markCommand(cmd, "node-outcome-stored")
	a.commandFinished()
	a.wake(a.wakeCommands, cmd)
}

// recordOutcome persists a finished command's outcome and hands it to the reconciler. A
// store failure is logged and left for the reconciler's pass to retry (persisted unset).
func (a *Agent) recordOutcome(uid string, o *commandOutcome) {
	err := a.commands.Record(uid, o, func(lc *liveCommand, o *commandOutcome) {
		if lc.Stopping && !lc.Drained && o.Phase == wbv1.CommandFailed && o.ExitCode == nil {
			o.Phase, o.RefusalCode, o.Message = wbv1.CommandCancelled, "", "cancelled: the command was deleted or cancelled ("+o.Message+")"
		}
	})
	if err != nil && a.runCtx != nil {
		ctrl.LoggerFrom(a.runCtx).Error(err, "Storing a command outcome; the next pass retries", "command", uid)
	}
}

// wake re-queues obj. Senders are bounded (one goroutine per running command or session,
// both capped), and the controller drains the channel continuously.
func (a *Agent) wake(ch chan event.GenericEvent, obj client.Object) {
	done := context.Background().Done() // nil: never (an agent under construction)
	if a.runCtx != nil {
		done = a.runCtx.Done()
	}
	select {
	case ch <- event.GenericEvent{Object: obj}:
	case <-done:
	}
}

// markCommand marks a step of the command's create → outcome path for the benchmarks' span
// breakdown (internal/platform/spans); nothing happens unless a recorder is installed.
func markCommand(cmd *wbv1.TerminalCommand, step string) {
	if spans.Enabled() {
		spans.Mark(cmd.Namespace+"/"+cmd.Name, step)
	}
}

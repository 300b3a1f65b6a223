package commands

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/runs"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/statusapply"
)

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
	decided *Outcome
	// reread: the profile changed since the memo's read this pass admitted against
	// (claimCurrent); the pass started nothing and writes nothing more.
	reread bool
	// fresh is the profile as read again when it differed from the memo (nil: gone).
	fresh *wbv1.CommandProfile
	// admittedContext is the environment's operational context a fast pass admitted under.
	admittedContext wbv1.ContextClass
	// slot is the concurrent-command slot reserved for this pass's start (slots.go).
	slot *procexec.Slot
}

// decide ends the command with an outcome decided at the node, nothing started.
func (p *cmdPass) decide(o *Outcome) {
	if p.claimed && p.fast {
		o.AdmittedBy, o.AdmittedContext = p.admittedBy, string(p.admittedContext)
	}
	p.decided = o
	p.finish(o)
}

// admitHere records this node's decision in the pass's status: status.decidedBy node,
// Admitted=True with who admitted it, the command's identity, its argv digest and the
// operational context it was admitted under. It is written with the start (a command
// still running after runs.RunningDelay) or with the outcome — one status write for a short
// command — never alone: no other component decides a command bound to this node, so
// there is no claim to stake first. From it on this node is the one writer of the
// command's admission record, phase and outcome (wbv1.CommandPhaseWriter).
//
// at is when the node decided (its start record's creation; zero: now), so every pass over
// the same record computes the same condition.
func (p *cmdPass) admitHere(node, by string, context wbv1.ContextClass, at time.Time) {
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
	p.setAt(wbv1.ConditionAdmitted, true, reason, "admitted at node "+node+" by "+by+" under operational context "+string(context)+" (fast path)", at)
}

// handOff leaves a command this node does not admit itself to the manager: one write of
// status.decidedBy manager (set once, never changed), after which the manager's gate is
// the one writer of its admission record and phase (consent, refusals, holds) and this
// node runs it only once the manager admitted it.
func (r *Room) handOff(ctx context.Context, cmd *wbv1.TerminalCommand) error {
	cur, next := commandOwned(&cmd.Status), commandOwned(&cmd.Status)
	next.DecidedBy = wbv1.PhaseWriterManager
	wrote, err := statusapply.Apply(ctx, r.d.Client, nodekit.FieldManager+"command", cmd, cur, next)
	if wrote {
		markCommand(cmd, "node-handed-off")
	}
	return err
}

func (p *cmdPass) set(t string, ok bool, reason, msg string) {
	statusapply.Set(&p.next.Conditions, p.all, statusapply.Cond(t, ok, reason, msg, p.cmd.Generation))
}

// setAt is set with the condition's transition time taken from the record (a start, an
// outcome) instead of the clock: a second pass over the same record — one that read a cache
// older than this node's own write — computes the same status, so the API server stores
// nothing new for it.
func (p *cmdPass) setAt(t string, ok bool, reason, msg string, at time.Time) {
	c := statusapply.Cond(t, ok, reason, msg, p.cmd.Generation)
	if !at.IsZero() {
		c.LastTransitionTime = metav1.NewTime(at)
	}
	statusapply.Set(&p.next.Conditions, p.all, c)
}

// finish records the outcome in status. Every field this agent owns is set again, so a
// pass that read a stale copy never drops what an earlier pass wrote.
func (p *cmdPass) finish(o *Outcome) {
	if !o.Started.IsZero() {
		p.next.StartTime = &metav1.Time{Time: o.Started}
		p.setAt(wbv1.ConditionStarted, true, "Started", "the process was started on this node", o.Started)
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
	p.setAt(wbv1.ConditionCompleted, true, string(o.Phase), statusapply.Truncate(o.Message, 1024), o.Completed)
}

// step decides one pass. The order matters for exactly-once: the store records the start
// before any process exists; a record without a live handle in this process means a
// previous process started it, and the command ends Failed/interrupted — never re-run.
func (r *Room) step(ctx context.Context, p *cmdPass) error {
	uid := string(p.cmd.UID)
	deleting := !p.cmd.DeletionTimestamp.IsZero() || p.cmd.Spec.DesiredState == wbv1.CommandDesiredCancelled
	if p.fast && !p.claimed {
		// A start record (or a stored decision) of a command whose status names no decider:
		// this node decided it and ran (or refused) it, and the pass that would have written
		// that crashed or failed to write. The decision is the one recorded with it.
		rec, ok, err := r.d.Table.Stored(uid)
		if err != nil {
			return err
		}
		if ok {
			by, context := rec.AdmittedBy, rec.AdmittedContext
			if o := runs.Decode[Outcome](rec.Outcome); by == "" && o != nil {
				by, context = o.AdmittedBy, o.AdmittedContext
			}
			p.admitHere(r.d.NodeName, by, wbv1.ContextClass(context), rec.CreatedAt)
		}
	}
	live, result, err := r.d.Table.Settle(uid)
	if err != nil {
		return err
	}
	p.next.NodeName = r.d.NodeName
	if live != nil {
		if result != nil {
			p.finish(result)
		} else {
			if deleting {
				r.d.Table.Stop(func(lc *Live) bool { return lc == live })
				p.result.RequeueAfter = time.Second // the awaiting goroutine also wakes this command
			}
			shown := meta.IsStatusConditionTrue(*p.all, wbv1.ConditionStarted)
			if !shown && !deleting && r.d.Table.RunningDue(live, time.Now()) > 0 {
				// Started moments ago: its Running status waits (runs.RunningDelay) so a
				// short command's outcome is written with its start; the start's timer
				// (startSandboxed) or the outcome wakes it. This pass writes nothing.
				return nil
			}
			p.next.StartTime = &metav1.Time{Time: live.Started}
			if !shown {
				// Only when status does not show the start yet: a wake of a running command
				// writes nothing.
				p.setAt(wbv1.ConditionStarted, true, "Started", startedMessage(live.Handle), live.Started)
			}
		}
		return nil
	}
	rec, ok, err := r.d.Table.Stored(uid)
	if err != nil {
		return err
	}
	if ok {
		o, err := r.d.Table.OutcomeOf(rec, func() *Outcome {
			return &Outcome{Phase: wbv1.CommandFailed, RefusalCode: string(actuation.CodeInterrupted), Completed: time.Now(),
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
		p.decide(&Outcome{Phase: wbv1.CommandCancelled, SignalOrigin: string(procexec.OriginCancel), Completed: time.Now(),
			Message: "cancelled (deleted or desiredState Cancelled) before it started"})
		return nil
	}
	return r.start(ctx, p)
}

// commandDrained says whether a node drain stopped the command.
func (r *Room) commandDrained(uid string) bool {
	drained := false
	r.d.Table.View(func(runs map[string]*Live) {
		lc := runs[uid]
		drained = lc != nil && lc.Drained
	})
	return drained
}

// refuse ends a command at the node with a code (nothing was started).
func (p *cmdPass) refuse(code, msg string) {
	p.decide(&Outcome{Phase: wbv1.CommandRefused, RefusalCode: code, Message: code + ": " + msg, Completed: time.Now()})
}

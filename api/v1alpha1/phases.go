package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file is the one place where phases are derived from conditions. Controllers and the
// node agent set conditions; they never decide a phase on their own.

// Condition reasons shared across kinds.
const (
	ReasonAwaitingConsent     = "AwaitingConsent"
	ReasonRefused             = "Refused"
	ReasonAdmittedByProfile   = "AdmittedByProfile"
	ReasonAdmittedByConsent   = "AdmittedByConsent"
	ReasonWaitingForProfile   = "WaitingForProfile"
	ReasonWaitingForSession   = "WaitingForSession"
	ReasonWaitingForPlacement = "WaitingForPlacement"
	ReasonSucceeded           = "Succeeded"
	ReasonFailed              = "Failed"
	ReasonTimedOut            = "TimedOut"
	ReasonCancelled           = "Cancelled"
	ReasonExpired             = "Expired"
	ReasonPlaced              = "Placed"
	ReasonReplanned           = "Replanned" // a placed environment's spec changed and its plan was re-derived (opctx)
	ReasonNoMatch             = "NoMatchingCapability"
	ReasonDraining            = "Draining"
	ReasonClosed              = "Closed"
	ReasonPaused              = "Paused" // Ready=False: the environment is paused as asked (spec.desiredState Paused)
)

func isTrue(conds []metav1.Condition, t string) bool { return meta.IsStatusConditionTrue(conds, t) }

func reasonOf(conds []metav1.Condition, t string) string {
	if c := meta.FindStatusCondition(conds, t); c != nil {
		return c.Reason
	}
	return ""
}

// CommandPhaseFor derives a TerminalCommand's phase: Completed (reason = outcome) wins, then
// Started, then an Admitted=False AwaitingConsent, else Pending.
func CommandPhaseFor(conds []metav1.Condition) CommandPhase {
	if isTrue(conds, ConditionCompleted) {
		switch r := reasonOf(conds, ConditionCompleted); r {
		case ReasonSucceeded, ReasonFailed, ReasonTimedOut, ReasonCancelled, ReasonRefused:
			return CommandPhase(r)
		default:
			return CommandFailed
		}
	}
	if isTrue(conds, ConditionStarted) {
		return CommandRunning
	}
	if c := meta.FindStatusCondition(conds, ConditionAdmitted); c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonAwaitingConsent {
		return CommandAwaitingConsent
	}
	return CommandPending
}

// PhaseWriter names the one component that writes a TerminalCommand's phase and its health
// conditions (Reconciling, Stalled) at a given moment.
type PhaseWriter string

// The two writers of a command's phase.
const (
	PhaseWriterManager PhaseWriter = "manager"
	PhaseWriterNode    PhaseWriter = "node"
)

// CommandPhaseWriter names the one component that decides a command's admission and writes
// its admission record (the Admitted condition, admittedBy, admittedContext, commandID,
// argvDigest, observedGeneration), its phase and its health conditions (Reconciling,
// Stalled), for the command's whole life: status.decidedBy, set in the write that decides
// and never changed (the CRD refuses a change). The node agent decides a command bound to
// it that its effective profile (or a remembered grant) admits without an operator — one
// hop, its claim is the deciding write; the manager's gate decides every other command
// (held for a reference or consent, refused, cancelled before admission, admitted after
// consent or after the node left it) and then also writes the phase the node's Started and
// Completed conditions derive. The node agent always writes the run and the outcome
// (Started, Completed, exit code, output, refusal at the node). Until a decision (no
// decidedBy) nobody has written any of them; the manager is the default.
func CommandPhaseWriter(s *TerminalCommandStatus) PhaseWriter {
	if s.DecidedBy == PhaseWriterNode {
		return PhaseWriterNode
	}
	return PhaseWriterManager
}

// CommandIsFinal says whether the command has its one recorded outcome.
func CommandIsFinal(conds []metav1.Condition) bool { return isTrue(conds, ConditionCompleted) }

// EnvironmentPhaseFor derives an Environment's phase. deleting is true while the object is
// being deleted.
func EnvironmentPhaseFor(conds []metav1.Condition, deleting bool) EnvironmentPhase {
	if isTrue(conds, ConditionExpired) {
		if isTrue(conds, ConditionCleanupComplete) || !deleting {
			return EnvironmentExpired
		}
		return EnvironmentDraining
	}
	ready := meta.FindStatusCondition(conds, ConditionReady)
	if ready != nil && ready.Status != metav1.ConditionTrue {
		switch ready.Reason {
		case ReasonFailed:
			return EnvironmentFailed
		case ReasonExpired:
			return EnvironmentExpired
		case ReasonClosed:
			return EnvironmentClosed
		case ReasonPaused:
			if !deleting {
				return EnvironmentPaused
			}
		}
	}
	if deleting || (ready != nil && ready.Reason == ReasonDraining) {
		if isTrue(conds, ConditionCleanupComplete) {
			return EnvironmentClosed
		}
		return EnvironmentDraining
	}
	if ready != nil && ready.Status == metav1.ConditionTrue {
		return EnvironmentReady
	}
	return EnvironmentAllocating
}

// EnvironmentPhaseWriter is the hand-off rule for an Environment's phase and its health
// conditions (Reconciling, Stalled): one writer at any time. The manager writes them for an
// ordinary Environment (derived from every component's conditions). For a pool claimer —
// status.poolMember set, by the manager's write that binds the claimer to its member's node —
// the node agent writes them, in the same status write as its own Ready condition, so the
// adopted instance and the phase a user reads arrive in one write instead of two. The rule
// is evaluated on the status a write leaves: the manager's binding write itself carries no
// phase, and no later manager write does (a stale manager pass that binds again carries
// none either, so it can never move the node's phase back). poolMember is never removed, so
// the hand-off happens once. Limit: the manager's Expired condition on a claimer whose node
// is gone is not turned into phase Expired (the node derives it when it acts).
func EnvironmentPhaseWriter(s *EnvironmentStatus) PhaseWriter {
	if s.PoolMember != nil {
		return PhaseWriterNode
	}
	return PhaseWriterManager
}

// EnvironmentAwaitsNode says a pool claimer's node has not written its status yet (the
// claimer has status.poolMember and no Ready condition). Until it does, the manager's writes
// carry Reconciling=True and Stalled=False, so kstatus reads a bound claimer InProgress
// rather than Current; the node's first write (its Ready condition and the health
// conditions, EnvironmentPhaseWriter) takes both over, and the manager's writes after it
// carry neither. A manager write from a pass that had not seen the node's write can set
// Reconciling=True again on a Ready claimer: that is itself a change of the claimer, whose
// node pass writes its own health back (a brief InProgress, never a false Current).
func EnvironmentAwaitsNode(s *EnvironmentStatus) bool {
	return s.PoolMember != nil && meta.FindStatusCondition(s.Conditions, ConditionReady) == nil
}

// ConsentDecisionFor derives a ConsentRequest's decision from its Decided condition.
func ConsentDecisionFor(conds []metav1.Condition) ConsentDecision {
	if isTrue(conds, ConditionDecided) {
		switch r := reasonOf(conds, ConditionDecided); r {
		case string(DecisionGranted), string(DecisionDenied), string(DecisionExpired), string(DecisionRevoked):
			return ConsentDecision(r)
		}
	}
	return DecisionPending
}

// SessionPhaseIsFinal says whether a session has ended (nothing of it runs any more).
func SessionPhaseIsFinal(p SessionPhase) bool {
	switch p {
	case SessionClosed, SessionFailed, SessionExpired, SessionKilled:
		return true
	}
	return false
}

// The cleanup finalizer (CleanupFinalizer) keeps an object while its node may still hold
// something for it: an environment's copy or VM, a session's PTY, a running command's
// process group, an artifact's blob. The manager adds it and releases it; the node agent
// never writes metadata, it reports through its own status conditions that it holds nothing
// more. The predicates below are that report, one per kind.

// EnvironmentReleased says the node holds nothing more for the environment: its teardown
// reported CleanupComplete, or it was never placed on a node.
func EnvironmentReleased(e *Environment) bool {
	return e.Status.NodeName == "" || isTrue(e.Status.Conditions, ConditionCleanupComplete)
}

// SessionReleased says the node holds nothing more for the session.
func SessionReleased(s *TerminalSession) bool {
	return s.Labels[NodeLabel] == "" || SessionPhaseIsFinal(s.Status.Phase) || isTrue(s.Status.Conditions, ConditionCleanupComplete)
}

// CommandReleased says no process runs or will run for the command: it has its outcome, or
// it was never admitted (the node runs admitted commands only).
func CommandReleased(c *TerminalCommand) bool {
	// A command the node claimed on its fast path records Admitted=True in its claim.
	return c.Labels[NodeLabel] == "" || CommandIsFinal(c.Status.Conditions) || !isTrue(c.Status.Conditions, ConditionAdmitted)
}

// ArtifactReleased says the node holds no blob for the artifact (it never stored one, or
// it reported the blob's removal).
func ArtifactReleased(a *Artifact) bool {
	return a.Labels[NodeLabel] == "" || a.Status.Digest == "" || isTrue(a.Status.Conditions, ConditionCleanupComplete)
}

// Health conditions (the kstatus conventions that Flux, Argo CD and `kubectl wait`-style
// tools read): Reconciling=True while work is pending, Stalled=True when the object reached
// an outcome that is not what was asked for and no further reconciliation will change it.
// Neither is set (both False) when the object is where its spec wants it.
const (
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
)

// Health is the kstatus summary of one phase.
type Health string

// Health values.
const (
	HealthProgressing Health = "Progressing" // Reconciling=True
	HealthCurrent     Health = "Current"     // both False
	HealthStalled     Health = "Stalled"     // Stalled=True
)

// CommandHealth: pending, held for consent or running is progress; only Succeeded is the
// outcome asked for; every other outcome is final and not a success.
func CommandHealth(p CommandPhase) Health {
	switch p {
	case CommandSucceeded:
		return HealthCurrent
	case CommandFailed, CommandTimedOut, CommandCancelled, CommandRefused:
		return HealthStalled
	}
	return HealthProgressing
}

// SessionHealth: a session is current while it serves, and when it closed as asked
// (desiredState Closed); a session that failed, was killed or expired without being asked
// to close is stalled.
func SessionHealth(p SessionPhase, closeRequested bool) Health {
	switch p {
	case SessionRunning, SessionIdle:
		return HealthCurrent
	case SessionClosed:
		if closeRequested {
			return HealthCurrent
		}
		return HealthStalled
	case SessionFailed, SessionKilled, SessionExpired:
		return HealthStalled
	}
	return HealthProgressing
}

// EnvironmentHealth: Ready is current; a Paused environment is neither reconciling nor
// stalled (it is held as asked; kstatus reads its Ready=False as InProgress, never
// Failed); allocating and draining are progress; a failed, expired or closed environment
// serves nothing any more.
func EnvironmentHealth(p EnvironmentPhase) Health {
	switch p {
	case EnvironmentReady, EnvironmentPaused:
		return HealthCurrent
	case EnvironmentFailed, EnvironmentExpired, EnvironmentClosed:
		return HealthStalled
	}
	return HealthProgressing
}

// HealthConditions returns the Reconciling and Stalled conditions for h; reason is the
// phase (CamelCase), message says why.
func HealthConditions(h Health, reason, message string, generation int64) []metav1.Condition {
	if reason == "" {
		reason = "Pending"
	}
	mk := func(t string, on bool) metav1.Condition {
		s := metav1.ConditionFalse
		if on {
			s = metav1.ConditionTrue
		}
		return metav1.Condition{Type: t, Status: s, Reason: reason, Message: message, ObservedGeneration: generation}
	}
	return []metav1.Condition{mk(ConditionReconciling, h == HealthProgressing), mk(ConditionStalled, h == HealthStalled)}
}

// FilePatch phases, and the reason of its Applied condition that holds a patch for approval.
const (
	FilePatchAwaitingApproval FilePatchPhase = "AwaitingApproval"
	FilePatchApplied          FilePatchPhase = "Applied"
	FilePatchRejected         FilePatchPhase = "Rejected"

	ReasonAwaitingApproval = "AwaitingApproval"
)

// FilePatchPhaseFor derives a patch's phase from its Applied condition: True is Applied;
// False for want of approval (or no condition yet) is AwaitingApproval; any other False or
// Unknown (a refusal, an operator's rejection, an apply whose outcome a restart made
// unknown) is Rejected.
func FilePatchPhaseFor(conds []metav1.Condition) FilePatchPhase {
	c := meta.FindStatusCondition(conds, ConditionApplied)
	switch {
	case c == nil || (c.Status == metav1.ConditionFalse && c.Reason == ReasonAwaitingApproval):
		return FilePatchAwaitingApproval
	case c.Status == metav1.ConditionTrue:
		return FilePatchApplied
	}
	return FilePatchRejected
}

// FilePatchIsFinal says whether the patch has its one outcome.
func FilePatchIsFinal(p FilePatchPhase) bool { return p == FilePatchApplied || p == FilePatchRejected }

// Probe results.
const (
	ProbePending ProbeResult = "Pending"
	ProbePass    ProbeResult = "Pass"
	ProbeFail    ProbeResult = "Fail"
	ProbeError   ProbeResult = "Error"
)

// ProbeResultFor derives a probe's result from its Completed condition (reason = result).
func ProbeResultFor(conds []metav1.Condition) ProbeResult {
	c := meta.FindStatusCondition(conds, ConditionCompleted)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ProbePending
	}
	switch r := ProbeResult(c.Reason); r {
	case ProbePass, ProbeFail, ProbeError:
		return r
	}
	return ProbeError
}

// ProbeIsFinal says whether the probe has its one result.
func ProbeIsFinal(r ProbeResult) bool { return r != "" && r != ProbePending }

// WaitStatusFor derives a wait's conditionStatus from its Completed condition (reason =
// outcome).
func WaitStatusFor(conds []metav1.Condition) WaitConditionStatus {
	c := meta.FindStatusCondition(conds, ConditionCompleted)
	if c == nil || c.Status != metav1.ConditionTrue {
		return WaitPending
	}
	switch s := WaitConditionStatus(c.Reason); s {
	case WaitSatisfied, WaitTimedOut, WaitCancelled, WaitFailed, WaitExpired:
		return s
	}
	return WaitFailed
}

// WaitIsFinal says whether the wait has its one outcome.
func WaitIsFinal(s WaitConditionStatus) bool { return s != "" && s != WaitPending }

// CommandPhaseIsFinal says whether a recorded command phase is an outcome (the node's store
// keeps phases as strings).
func CommandPhaseIsFinal(p CommandPhase) bool {
	switch p {
	case CommandSucceeded, CommandFailed, CommandTimedOut, CommandCancelled, CommandRefused:
		return true
	}
	return false
}

// ActionRun phases: the same lifecycle as a TerminalCommand.
const (
	ActionRunPending         ActionRunPhase = "Pending"
	ActionRunAwaitingConsent ActionRunPhase = "AwaitingConsent"
	ActionRunRunning         ActionRunPhase = "Running"
	ActionRunSucceeded       ActionRunPhase = "Succeeded"
	ActionRunFailed          ActionRunPhase = "Failed"
	ActionRunTimedOut        ActionRunPhase = "TimedOut"
	ActionRunCancelled       ActionRunPhase = "Cancelled"
	ActionRunRefused         ActionRunPhase = "Refused"
)

// ActionRunPhaseFor derives an ActionRun's phase exactly as CommandPhaseFor: Completed
// (reason = outcome) wins, then Started, then Admitted=False AwaitingConsent, else Pending.
func ActionRunPhaseFor(conds []metav1.Condition) ActionRunPhase {
	return ActionRunPhase(CommandPhaseFor(conds))
}

// ActionRunIsFinal says whether the run has its one recorded outcome.
func ActionRunIsFinal(conds []metav1.Condition) bool { return isTrue(conds, ConditionCompleted) }

// ActionRunHealth mirrors CommandHealth.
func ActionRunHealth(p ActionRunPhase) Health { return CommandHealth(CommandPhase(p)) }

// ActionRunReleased says no process runs or will run for the run.
func ActionRunReleased(r *ActionRun) bool {
	return r.Labels[NodeLabel] == "" || ActionRunIsFinal(r.Status.Conditions) || !isTrue(r.Status.Conditions, ConditionAdmitted)
}

// WaitHealth: a pending wait is progress; Satisfied, and Cancelled (the spec asked for
// it), are where the spec wants the wait; TimedOut, Failed and Expired are final outcomes
// that are not.
func WaitHealth(s WaitConditionStatus) Health {
	switch s {
	case WaitSatisfied, WaitCancelled:
		return HealthCurrent
	case WaitTimedOut, WaitFailed, WaitExpired:
		return HealthStalled
	}
	return HealthProgressing
}

// ProbeHealth: a pending probe is progress; Pass is current; Fail (the checked condition
// did not hold) and Error (it could not be checked) are final and not what was asked.
func ProbeHealth(r ProbeResult) Health {
	switch r {
	case ProbePass:
		return HealthCurrent
	case ProbeFail, ProbeError:
		return HealthStalled
	}
	return HealthProgressing
}

// FilePatchHealth: a patch awaiting approval is progress; Applied is current; Rejected
// (refused, rejected by an operator, or an apply whose outcome is unknown) is stalled.
func FilePatchHealth(p FilePatchPhase) Health {
	switch p {
	case FilePatchApplied:
		return HealthCurrent
	case FilePatchRejected:
		return HealthStalled
	}
	return HealthProgressing
}

// ConsentRequestHealth: a request without a decision is progress; a decision an operator
// made (granted, denied, or a grant later revoked) is the request's outcome; a request
// that expired without a decision is stalled.
func ConsentRequestHealth(d ConsentDecision) Health {
	switch d {
	case DecisionGranted, DecisionDenied, DecisionRevoked:
		return HealthCurrent
	case DecisionExpired:
		return HealthStalled
	}
	return HealthProgressing
}

// ConsentGrantHealth: an active grant is current, and so is an inactive one that is
// where its spec put it (a deny decision, a revoked grant, an allow-once grant that admitted
// its command); one that stopped admitting otherwise (expired, its request gone, its
// operator's binding gone) is stalled.
func ConsentGrantHealth(active, asKept bool) Health {
	if active || asKept {
		return HealthCurrent
	}
	return HealthStalled
}

// SkillReplayHealth: a replay in progress is progress; only a successful replay whose
// proof verdict is pass is where its spec wants it; a replay that halted, completed with
// surprises, was refused, or whose proof is not pass (partial and inconclusive are never
// success) is stalled.
func SkillReplayHealth(r SkillReplayResult, verdict string) Health {
	switch r {
	case "", SkillReplayRunning:
		return HealthProgressing
	case SkillReplaySuccess:
		if verdict == "pass" {
			return HealthCurrent
		}
	}
	return HealthStalled
}

// ViewHealth: a view that publishes is current; one that has no phase yet is progress; a
// superseded, refused or unavailable view serves nobody until its spec changes (a new
// view, or a new sessionRef): stalled.
func ViewHealth(p ViewPhase) Health {
	switch p {
	case ViewPublishing:
		return HealthCurrent
	case "":
		return HealthProgressing
	}
	return HealthStalled
}

package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
	"sensorium.dev/workbench/internal/platform/spans"
)

// Timing of the consent gate.
const (
	// ReferenceGrace is how long a command may name a session or profile that does not
	// exist yet (GitOps applies objects in any order) before it is refused.
	ReferenceGrace = 30 * time.Second
	// PlacementRecheck is how often an admitted command re-reads an unplaced environment.
	PlacementRecheck = 10 * time.Second
	// DefaultConsentTimeout is how long an operator has to answer.
	DefaultConsentTimeout = 900
)

// TerminalCommandReconciler is the consent gate of the commands it decides: those a node
// agent handed over (status.decidedBy manager: consent, refusals, holds) and those no agent
// decides (bound to no node, or to a node without a registered agent: nodeDecides). A
// command whose argv the effective profile (profile + active grants) admits is bound to its
// environment's node and marked Admitted; one it does not admit is held AwaitingConsent
// with a ConsentRequest, or Refused with profile-missing when the profile forbids
// prompting. A command bound to a node with an agent is that node's to decide; the manager
// writes nothing of it unless handed over. Every accepted command ends in exactly one
// recorded outcome.
type TerminalCommandReconciler struct{ ConsentGate }

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=terminalcommands,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=terminalcommands/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=terminalsessions;commandprofiles;environments;workbenchnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=consentgrants/status,verbs=get;update;patch

// terminalCommandOwned is what the manager writes of a command it decided
// (status.decidedBy manager, wbv1.CommandPhaseWriter): its admission record, the phase and
// the health conditions — derived from every condition, also after the node's Started and
// Completed — and, for a command it refused or cancelled before admission, the outcome.
// An admitted command's outcome belongs to the node agent. Of a command the node decided
// the manager writes nothing at all (Reconcile returns before any write).
func terminalCommandOwned(s *wbv1.TerminalCommandStatus) wbv1.TerminalCommandStatus {
	out := wbv1.TerminalCommandStatus{
		CommandID: s.CommandID, ArgvDigest: s.ArgvDigest, Phase: s.Phase, AdmittedBy: s.AdmittedBy, AdmittedContext: s.AdmittedContext,
		DecidedBy: s.DecidedBy, ConsentRequestRef: s.ConsentRequestRef, ObservedGeneration: s.ObservedGeneration,
		Conditions: ownedConditions(s.Conditions, wbv1.ConditionAdmitted, wbv1.ConditionReconciling, wbv1.ConditionStalled),
	}
	if !isTrueCond(s.Conditions, wbv1.ConditionAdmitted) {
		out.Refusal, out.CompletionTime, out.SignalOrigin = s.Refusal, s.CompletionTime, s.SignalOrigin
		out.Conditions = ownedConditions(s.Conditions, wbv1.ConditionAdmitted, wbv1.ConditionCompleted, wbv1.ConditionReconciling, wbv1.ConditionStalled)
	}
	return out
}

// summarize writes the derived phase and health of a command the manager decided and no
// longer gates (admitted, or final): the node's Started and Completed conditions move the
// phase, and the manager, its one writer, follows them. The write is held to the version
// read, so a stale read never writes an old phase; a conflict reads again.
func (r *TerminalCommandReconciler) summarize(ctx context.Context, cmd *wbv1.TerminalCommand) (ctrl.Result, error) {
	cur, next := terminalCommandOwned(&cmd.Status), terminalCommandOwned(&cmd.Status)
	// The phase and health (and this record of the generation they follow) are derived
	// from this generation (a cancel raises it): without it kstatus reads a cancelled
	// command InProgress forever.
	next.ObservedGeneration = cmd.Generation
	next.DecidedBy = wbv1.PhaseWriterManager
	all := append([]metav1.Condition(nil), cmd.Status.Conditions...)
	next.Phase = wbv1.CommandPhaseFor(all)
	for _, hc := range wbv1.HealthConditions(wbv1.CommandHealth(next.Phase), string(next.Phase), "command is "+string(next.Phase), cmd.Generation) {
		setCondition(&next.Conditions, &all, hc)
	}
	wrote, err := applyStatusIfUnchanged(ctx, r.Client, "terminalcommand", cmd, cur, next)
	if apierrors.IsConflict(err) {
		return ctrl.Result{}, nil // another writer moved it: its watch event brings the next pass
	}
	if wrote {
		markCommand(cmd, "manager-phase-written-"+string(next.Phase))
	}
	if wrote && cur.Phase != next.Phase {
		phaseTransitions.WithLabelValues("TerminalCommand", string(next.Phase)).Inc()
	}
	return ctrl.Result{}, err
}

// commandPass carries one reconcile pass.
type commandPass struct {
	cmd       *wbv1.TerminalCommand
	cur, next wbv1.TerminalCommandStatus
	all       []metav1.Condition
	result    ctrl.Result
	// reevaluate: the command was admitted under an earlier operational context of its
	// environment and has not started; this pass decides admission again (never leaving it
	// to the node's fast path, which only takes commands the manager has not decided).
	reevaluate bool
}

func (p *commandPass) set(c metav1.Condition) { setCondition(&p.next.Conditions, &p.all, c) }

func (p *commandPass) hold(reason, msg string) {
	// Not admitted now: an earlier admission (re-evaluated after a context raise) is not
	// reported as if it still held.
	p.next.AdmittedBy, p.next.AdmittedContext = "", ""
	p.set(cond(wbv1.ConditionAdmitted, false, reason, msg, p.cmd.Generation))
}

func (p *commandPass) requeueAfter(d time.Duration) { p.result.RequeueAfter = d }

func (r *TerminalCommandReconciler) refuse(p *commandPass, code actuation.Code, msg string) {
	p.next.Refusal = &wbv1.Refusal{Code: string(code), Message: truncate(msg, 1024)}
	p.next.CompletionTime = &metav1.Time{Time: r.Now()}
	p.set(cond(wbv1.ConditionAdmitted, false, wbv1.ReasonRefused, string(code)+": "+msg, p.cmd.Generation))
	p.set(cond(wbv1.ConditionCompleted, true, wbv1.ReasonRefused, string(code)+": "+msg, p.cmd.Generation))
	refusals.WithLabelValues("TerminalCommand", string(code)).Inc()
}

// Reconcile implements reconcile.Reconciler.
func (r *TerminalCommandReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cmd wbv1.TerminalCommand
	if err := r.Get(ctx, req.NamespacedName, &cmd); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if wbv1.CommandPhaseWriter(&cmd.Status) == wbv1.PhaseWriterNode {
		// The node bound to it decided it: the admission record, the phase and the outcome
		// are the node's alone; the manager writes nothing of it.
		return ctrl.Result{}, nil
	}
	if decides, err := r.nodeDecides(ctx, &cmd); err != nil || decides {
		// Bound to a node whose agent decides its commands, and not handed to the manager
		// (status.decidedBy manager): the node is the one decider; nothing here.
		return ctrl.Result{}, err
	}
	reevaluate, err := r.admissionSuperseded(ctx, &cmd)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !reevaluate && (wbv1.CommandIsFinal(cmd.Status.Conditions) || isTrueCond(cmd.Status.Conditions, wbv1.ConditionAdmitted)) {
		return r.summarize(ctx, &cmd)
	}
	p := &commandPass{cmd: &cmd, cur: terminalCommandOwned(&cmd.Status), next: terminalCommandOwned(&cmd.Status),
		all: append([]metav1.Condition(nil), cmd.Status.Conditions...), reevaluate: reevaluate}
	p.next.CommandID = string(cmd.UID)
	p.next.ArgvDigest = wbv1.Digest(actuation.ArgvDigest(string(cmd.Spec.ProfileRef), cmd.Spec.Argv, convert.Cwd(cmd.Spec.Cwd)))
	p.next.ObservedGeneration = cmd.Generation
	p.next.DecidedBy = wbv1.PhaseWriterManager // every write below decides
	if cmd.Spec.DesiredState == wbv1.CommandDesiredCancelled {
		// Cancelled before admission: it is never admitted, so no node ever starts it.
		msg := "cancelled before it was admitted"
		p.next.SignalOrigin, p.next.CompletionTime = wbv1.SignalOrigin("cancel"), &metav1.Time{Time: r.Now()}
		p.set(cond(wbv1.ConditionAdmitted, false, wbv1.ReasonCancelled, msg, cmd.Generation))
		p.set(cond(wbv1.ConditionCompleted, true, wbv1.ReasonCancelled, msg, cmd.Generation))
	} else if err := r.gate(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	p.next.Phase = wbv1.CommandPhaseFor(p.all)
	for _, hc := range wbv1.HealthConditions(wbv1.CommandHealth(p.next.Phase), string(p.next.Phase), "command is "+string(p.next.Phase), cmd.Generation) {
		p.set(hc)
	}
	// The gate's decision on a command bound to a node is written only against the version
	// this pass read: a node agent that registered since this pass read its WorkbenchNode
	// may have decided it meanwhile (nodeDecides), and then its decision stands (the
	// conflict brings the next pass, which sees decidedBy node and writes nothing).
	write := applyStatus
	if cmd.Labels[wbv1.NodeLabel] != "" {
		write = applyStatusIfUnchanged
	}
	wrote, err := write(ctx, r.Client, "terminalcommand", &cmd, p.cur, p.next)
	if apierrors.IsConflict(err) {
		return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // SA1019: a rate-limited requeue (RequeueAfter has no such form)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote {
		markCommand(&cmd, "manager-gate-written-"+string(p.next.Phase))
	}
	if wrote && p.cur.Phase != p.next.Phase {
		phaseTransitions.WithLabelValues("TerminalCommand", string(p.next.Phase)).Inc()
		evType, note := corev1.EventTypeNormal, fmt.Sprintf("Command is %s", p.next.Phase)
		if p.next.Refusal != nil {
			evType, note = corev1.EventTypeWarning, fmt.Sprintf("Command refused: %s", p.next.Refusal.Code)
		}
		r.Recorder.Eventf(&cmd, nil, evType, string(p.next.Phase), "Gate", "%s", note)
	}
	return p.result, nil
}

// gate decides admission for one pass.
func (r *TerminalCommandReconciler) gate(ctx context.Context, p *commandPass) error {
	cmd := p.cmd
	if conflict, err := r.idempotencyConflict(ctx, cmd); err != nil || conflict != "" {
		if conflict != "" {
			r.refuse(p, actuation.CodeIdempotencyConflict, conflict)
		}
		return err
	}
	young := r.Now().Sub(cmd.CreationTimestamp.Time) < ReferenceGrace
	var sess wbv1.TerminalSession
	if found, err := r.readReference(ctx, p, reference{kind: "TerminalSession", what: "session", name: string(cmd.Spec.SessionRef),
		waiting: wbv1.ReasonWaitingForSession, missing: actuation.CodeSessionMissing, field: "spec.sessionRef"}, &sess, young); !found {
		return err
	}
	switch sess.Status.Phase {
	case wbv1.SessionClosed, wbv1.SessionFailed, wbv1.SessionExpired, wbv1.SessionKilled:
		r.refuse(p, actuation.CodeSessionClosed, "session "+sess.Name+" is "+string(sess.Status.Phase))
		return nil
	}
	var env wbv1.Environment
	if found, err := r.readReference(ctx, p, environmentReference(sess.Spec.EnvironmentRef), &env, young); !found {
		return err
	}
	if rf := environmentUnusable(&env); rf != nil {
		r.refuse(p, rf.Code, rf.Message)
		return nil
	}
	var prof wbv1.CommandProfile
	if found, err := r.readReference(ctx, p, reference{kind: "CommandProfile", what: "profile", name: string(cmd.Spec.ProfileRef),
		waiting: wbv1.ReasonWaitingForProfile, missing: actuation.CodeProfileMissing, field: "spec.profileRef"}, &prof, young); !found {
		return err
	}
	// The core's one admission pipeline (shape, caps, cwd, env, argv against the profile and
	// the consent entries bound to this command); the node decides with the same function.
	d := actuation.AdmitCommand(convert.Profile(&prof.Spec), convert.Entries(cmd.Namespace, prof.Status.ConsentEntries),
		convert.Intent(&cmd.Spec), convert.SubjectIn(cmd, &env), nil)
	if d.Malformed {
		r.refuse(p, d.Refusal.Code, d.Refusal.Message)
		return nil
	}
	adm := d.Admission
	if d.Verdict != actuation.VerdictAdmitted {
		adm.Refusal = d.Refusal // consentPath: consent-required is asked, anything else refused
		granted, err := r.consentPath(ctx, p, &prof, &env, adm)
		if err != nil || !granted {
			return err
		}
		adm = actuation.Admission{Admitted: true, By: p.next.AdmittedBy, Scope: actuation.ConsentScope(wbv1.ConsentAllowOnce)}
	}
	return r.admit(ctx, p, &env, adm)
}

// readReference is the gate's readReference for a command: a missing object still missing
// after ReferenceGrace is refused here. found is true only when obj was read.
func (r *TerminalCommandReconciler) readReference(ctx context.Context, p *commandPass, ref reference, obj client.Object, young bool) (bool, error) {
	found, rf, err := readReference(ctx, r.Client, p.cmd.Namespace, ref, obj, p.cmd.Name, young, p)
	if rf != nil {
		r.refuse(p, rf.Code, rf.Message)
	}
	return found, err
}

// idempotencyConflict enforces that an idempotency key names one intent in its namespace
// (not per node): the key belongs to the oldest command holding it (creation time, then
// name), and a later command with the same key and another spec (any field but
// desiredState) is refused idempotency-conflict instead of replaying the owner's outcome.
// A later command with the same spec is admitted as usual: the spec names the same session
// and so the same node, whose store replays the owner's outcome without running again.
func (r *TerminalCommandReconciler) idempotencyConflict(ctx context.Context, cmd *wbv1.TerminalCommand) (string, error) {
	if cmd.Spec.IdempotencyKey == "" {
		return "", nil
	}
	var same wbv1.TerminalCommandList
	if err := r.List(ctx, &same, client.InNamespace(cmd.Namespace), client.MatchingFields{indexCommandIdemKey: cmd.Spec.IdempotencyKey}); err != nil {
		return "", fmt.Errorf("listing commands with the idempotency key of %s/%s: %w", cmd.Namespace, cmd.Name, err)
	}
	var owner *wbv1.TerminalCommand
	for i := range same.Items {
		c := &same.Items[i]
		if owner == nil || c.CreationTimestamp.Before(&owner.CreationTimestamp) ||
			c.CreationTimestamp.Equal(&owner.CreationTimestamp) && c.Name < owner.Name {
			owner = c
		}
	}
	if owner == nil || owner.UID == cmd.UID {
		return "", nil
	}
	a, b := owner.Spec, cmd.Spec
	a.DesiredState, b.DesiredState = "", ""
	if equality.Semantic.DeepEqual(a, b) {
		return "", nil
	}
	return fmt.Sprintf("idempotency key %q belongs to command %s in namespace %s, whose spec differs: one key names one intent", cmd.Spec.IdempotencyKey, owner.Name, cmd.Namespace), nil
}

// consentPath handles an argv the effective profile does not admit. It returns true only
// when an allow-once grant was already consumed by this very command (a pass that crashed
// after consuming it).
func (r *TerminalCommandReconciler) consentPath(ctx context.Context, p *commandPass, prof *wbv1.CommandProfile, env *wbv1.Environment, adm actuation.Admission) (bool, error) {
	cmd := p.cmd
	// The core answers consent-required for an argv an operator could approve; anything
	// else (another executable, a matching deny entry) is refused outright.
	if adm.Refusal == nil || adm.Refusal.Code != actuation.CodeConsentRequired {
		code, msg := actuation.CodeArgvNotAdmitted, "argv is not admitted"
		if adm.Refusal != nil {
			code, msg = adm.Refusal.Code, adm.Refusal.Message
		}
		r.refuse(p, code, msg)
		return false, nil
	}
	if prof.Spec.ConsentPrompting == wbv1.ConsentPromptingForbidden {
		r.refuse(p, actuation.CodeProfileMissing, "no profile admits this argv and profile "+prof.Name+" forbids prompting an operator")
		return false, nil
	}
	if env.Status.EffectiveOperationalContext == "" {
		// An operator reviews a command under its environment's operational context, which
		// the placement sets: asking before it would ask under none, and the placement would
		// then leave that question behind, Pending, for a second one. The environment's
		// watch (pendingIn) wakes this command once it is placed.
		p.hold(wbv1.ReasonWaitingForPlacement, fmt.Sprintf("%s: argv is not admitted by profile %s; an operator is asked once environment %s is placed under its operational context",
			actuation.CodeConsentRequired, prof.Name, env.Name))
		return false, nil
	}
	cr, err := r.ensureConsentRequest(ctx, p, prof, env)
	if ref := (*actuation.Refusal)(nil); errors.As(err, &ref) {
		r.refuse(p, ref.Code, ref.Message)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	p.next.ConsentRequestRef = cr.Name
	switch wbv1.ConsentDecisionFor(cr.Status.Conditions) {
	case wbv1.DecisionDenied:
		r.refuse(p, actuation.CodeConsentDenied, "an operator denied this command")
	case wbv1.DecisionExpired:
		r.refuse(p, actuation.CodeConsentExpired, "no operator decided before the request's timeout")
	case wbv1.DecisionRevoked:
		r.refuse(p, actuation.CodeConsentRevoked, "the grant was revoked before the command was admitted")
	case wbv1.DecisionGranted:
		var g wbv1.ConsentGrant
		if err := r.Get(ctx, types.NamespacedName{Namespace: cmd.Namespace, Name: cr.Status.GrantRef}, &g); err == nil &&
			g.Spec.Scope == wbv1.ConsentAllowOnce && g.Spec.RequestUID == cr.UID && g.Status.ConsumedByUID == cmd.UID &&
			cr.Spec.Descriptor.CommandUID == cmd.UID && cr.Spec.Descriptor.ArgvDigest == p.next.ArgvDigest {
			p.next.AdmittedBy = g.Name
			return true, nil
		}
		// The grant's argv shape reaches the profile's projection shortly; the profile
		// watch wakes this command then.
		p.hold(wbv1.ReasonAwaitingConsent, "granted by "+cr.Status.GrantRef+"; waiting for the effective profile")
	default:
		p.hold(wbv1.ReasonAwaitingConsent, fmt.Sprintf("%s: argv is not admitted by profile %s; waiting for an operator on %s", actuation.CodeConsentRequired, prof.Name, cr.Name))
	}
	return false, nil
}

// ensureConsentRequest finds or creates the request bound to this very command object. A
// request is found by name, but only a request whose descriptor names this object's UID and
// argv digest is this command's: one left behind by a deleted command of the same name
// (kept alive by a remembered grant) is another object's, and this command asks under a
// name derived from its UID instead.
func (r *TerminalCommandReconciler) ensureConsentRequest(ctx context.Context, p *commandPass, prof *wbv1.CommandProfile, env *wbv1.Environment) (*wbv1.ConsentRequest, error) {
	cmd := p.cmd
	names := []string{truncateName(cmd.Name, "-consent"), truncateName(cmd.Name, "-consent-"+shortUID(cmd.UID))}
	if ref := cmd.Status.ConsentRequestRef; ref != "" && ref != names[0] {
		names = []string{ref}
	}
	// A request asked under an earlier operational context of the environment is not this
	// command's question under the current one: the operator is asked again, under a name
	// naming the context.
	names = append(names, truncateName(cmd.Name, "-consent-"+shortUID(cmd.UID)+"-"+string(env.Status.EffectiveOperationalContext)))
	name := ""
	for _, n := range names {
		cr := &wbv1.ConsentRequest{}
		err := r.Get(ctx, types.NamespacedName{Namespace: cmd.Namespace, Name: n}, cr)
		if apierrors.IsNotFound(err) {
			name = n
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading ConsentRequest %s/%s: %w", cmd.Namespace, n, err)
		}
		if cr.Spec.Descriptor.CommandUID == cmd.UID {
			if cr.Spec.Descriptor.OperationalContext != env.Status.EffectiveOperationalContext {
				continue // asked under another context (above)
			}
			if cr.Spec.Descriptor.ArgvDigest != p.next.ArgvDigest || cr.Spec.Descriptor.EnvironmentRef != wbv1.ObjectName(env.Name) ||
				cr.Spec.Descriptor.EnvironmentUID != env.UID {
				return nil, fmt.Errorf("ConsentRequest %s/%s does not bind command %s's argv and environment", cmd.Namespace, n, cmd.Name)
			}
			return cr, nil
		}
	}
	if name == "" {
		return nil, fmt.Errorf("no free ConsentRequest name for command %s/%s (tried %v)", cmd.Namespace, cmd.Name, names)
	}
	core := convert.Profile(&prof.Spec)
	intent := convert.Intent(&cmd.Spec)
	cr := &wbv1.ConsentRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cmd.Namespace, Labels: withCorrelation(map[string]string{wbv1.EnvironmentLabel: env.Name}, cmd)},
		Spec: wbv1.ConsentRequestSpec{
			Descriptor: wbv1.ConsentDescriptor{
				Capability: wbv1.CapabilityTerminalCommand, CommandRef: wbv1.ObjectName(cmd.Name), CommandUID: cmd.UID,
				ProfileRef:     cmd.Spec.ProfileRef,
				EnvironmentRef: wbv1.ObjectName(env.Name), EnvironmentUID: env.UID, Argv: cmd.Spec.Argv, ArgvDigest: p.next.ArgvDigest, Cwd: cmd.Spec.Cwd,
				OperationalContext: env.Status.EffectiveOperationalContext,
				RememberedSpan: "allow-once admits only this command object (uid " + string(cmd.UID) + "); remembered grants admit this argv shape on environment " +
					env.Name + " only, with profile " + string(cmd.Spec.ProfileRef) + " and this cwd",
				Roots: prof.Spec.AllowedRoots,
				SafetyCaps: wbv1.SafetyCaps{
					TimeoutSeconds: intent.TimeoutSeconds, OutputBytes: intent.OutputBytes,
					Egress: wbv1.EgressPolicy(core.Egress), Credentials: wbv1.CredentialPolicy(core.Credentials),
					GitMetadata: gitMetadataOf(&prof.Spec),
				},
				Requester:  cmd.Spec.CreatedBy,
				ReasonCode: string(actuation.CodeConsentRequired),
			},
			Options: []wbv1.ConsentScope{wbv1.ConsentDeny, wbv1.ConsentAllowOnce, wbv1.ConsentRememberExactArgv, wbv1.ConsentRememberArgvPrefix},
		},
	}
	if ref, err := r.settle(ctx, cr); err != nil || ref != nil {
		return nil, errors.Join(err, ref.Err())
	}
	// No owner reference: a remembered grant outlives the command that prompted it, so the
	// request it answers must too. The consent request controller deletes a request once
	// its command is gone and no durable grant needs it.
	log.FromContext(ctx).Info("Creating consent request", "command", client.ObjectKeyFromObject(cmd), "request", name)
	if err := r.Create(ctx, cr); err != nil {
		return nil, fmt.Errorf("creating ConsentRequest %s: %w", name, err)
	}
	r.Recorder.Eventf(cmd, cr, corev1.EventTypeNormal, "ConsentRequested", "Gate", "Argv not admitted by profile %s; asked an operator", prof.Name)
	return cr, nil
}

// admit binds an admitted command to its environment's node. An allow-once grant is
// consumed first, so it can never admit two commands.
func (r *TerminalCommandReconciler) admit(ctx context.Context, p *commandPass, env *wbv1.Environment, adm actuation.Admission) error {
	cmd := p.cmd
	node := placedNode(env, p)
	if node == "" {
		return nil
	}
	if p.reevaluate && adm.By != actuation.AdmittedByProfile && adm.Scope == actuation.ConsentScope(wbv1.ConsentAllowOnce) {
		// The operator consented once, under the context the command was admitted under;
		// that consent is not used under the environment's new context.
		r.refuse(p, actuation.CodeOperationalContextSuperseded, fmt.Sprintf(
			"allow-once consent %s was given under operational context %s; environment %s is now %s: submit the command again to ask an operator under the new context",
			adm.By, p.cur.AdmittedContext, env.Name, env.Status.EffectiveOperationalContext))
		return nil
	}
	if adm.By != actuation.AdmittedByProfile && adm.Scope == actuation.ConsentScope(wbv1.ConsentAllowOnce) {
		if err := r.consume(ctx, cmd, adm.By); err != nil {
			return err
		}
	}
	if err := bindToNode(ctx, r.Client, "TerminalCommand", cmd, node, env.Name); err != nil {
		return err
	}
	reason := wbv1.ReasonAdmittedByProfile
	if adm.By != "profile" {
		reason = wbv1.ReasonAdmittedByConsent
	}
	p.next.AdmittedBy = adm.By
	p.next.AdmittedContext = env.Status.EffectiveOperationalContext
	msg := "admitted by " + adm.By + " for node " + node + " under operational context " + string(env.Status.EffectiveOperationalContext)
	if p.reevaluate {
		msg = "re-evaluated: " + msg + " (was " + string(p.cur.AdmittedContext) + ")"
	}
	p.set(cond(wbv1.ConditionAdmitted, true, reason, msg, cmd.Generation))
	return nil
}

// nodeDecides says whether the node agent the command is bound to is its one decider: the
// command carries a node label (the binding webhook set it at create), nobody has decided
// it yet, and that node has a registered agent (its WorkbenchNode names an agentVersion,
// which only a node agent publishes). Such an agent decides every command bound to it: it
// admits and runs what its profile (or a remembered grant on its environment) admits, with
// the decision, the start and the outcome in one status write, and hands everything else
// to the manager with one write of status.decidedBy manager (consent, refusals, holds).
// A node without an agent (a WorkbenchNode nobody serves, or none at all) decides nothing:
// the manager decides its commands as before. No grace, no race: which component decides
// is a property of the node, not of who writes first.
func (r *TerminalCommandReconciler) nodeDecides(ctx context.Context, cmd *wbv1.TerminalCommand) (bool, error) {
	node := cmd.Labels[wbv1.NodeLabel]
	if node == "" || cmd.Status.DecidedBy != "" || meta.FindStatusCondition(cmd.Status.Conditions, wbv1.ConditionAdmitted) != nil {
		return false, nil
	}
	var wn wbv1.WorkbenchNode
	if err := r.Get(ctx, types.NamespacedName{Name: node}, &wn); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading WorkbenchNode %s of TerminalCommand %s/%s: %w", node, cmd.Namespace, cmd.Name, err)
	}
	return wn.Status.AgentVersion != "", nil
}

// admissionSuperseded says whether cmd holds an admission of the manager made under an
// operational context its environment no longer has (actuation.CheckAdmissionContext),
// and has not started: such an admission is not used under the new context, the command
// is decided again. A command the node claimed or started keeps the outcome the node owns.
func (r *TerminalCommandReconciler) admissionSuperseded(ctx context.Context, cmd *wbv1.TerminalCommand) (bool, error) {
	if !isTrueCond(cmd.Status.Conditions, wbv1.ConditionAdmitted) || cmd.Status.AdmittedContext == "" ||
		wbv1.CommandIsFinal(cmd.Status.Conditions) || meta.FindStatusCondition(cmd.Status.Conditions, wbv1.ConditionStarted) != nil {
		return false, nil
	}
	name := cmd.Labels[wbv1.EnvironmentLabel]
	if name == "" {
		return false, nil
	}
	var env wbv1.Environment
	if err := r.Get(ctx, types.NamespacedName{Namespace: cmd.Namespace, Name: name}, &env); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil // the gate's own refusal paths handle a vanished environment
		}
		return false, fmt.Errorf("reading Environment %s/%s of TerminalCommand %s: %w", cmd.Namespace, name, cmd.Name, err)
	}
	ref := actuation.CheckAdmissionContext(actuation.ContextClass(cmd.Status.AdmittedContext), actuation.ContextClass(env.Status.EffectiveOperationalContext))
	if ref != nil {
		log.FromContext(ctx).Info("Re-evaluating a superseded admission", "command", client.ObjectKeyFromObject(cmd), "code", ref.Code, "message", ref.Message)
	}
	return ref != nil, nil
}

func (r *TerminalCommandReconciler) consume(ctx context.Context, cmd *wbv1.TerminalCommand, grant string) error {
	var g wbv1.ConsentGrant
	if err := r.Get(ctx, types.NamespacedName{Namespace: cmd.Namespace, Name: grant}, &g); err != nil {
		return fmt.Errorf("reading allow-once grant %s: %w", grant, err)
	}
	if g.Status.ConsumedByUID == cmd.UID {
		return nil
	}
	if g.Status.ConsumedBy != "" || g.Status.ConsumedByUID != "" {
		return fmt.Errorf("allow-once grant %s was consumed by %s (uid %s), not by %s/%s (uid %s)", grant, g.Status.ConsumedBy, g.Status.ConsumedByUID, cmd.Namespace, cmd.Name, cmd.UID)
	}
	_, err := applyStatus(ctx, r.Client, "terminalcommand", &g, wbv1.ConsentGrantStatus{}, wbv1.ConsentGrantStatus{ConsumedBy: cmd.Name, ConsumedByUID: cmd.UID})
	return err
}

// shortUID is the first 8 characters of a UID, for names derived from an object.
func shortUID(uid types.UID) string {
	s := string(uid)
	if len(s) > 8 {
		s = s[:8]
	}
	return s
}

func isTrueCond(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// truncateName keeps a derived name within 253 characters.
func truncateName(base, suffix string) string {
	if len(base)+len(suffix) > 253 {
		base = base[:253-len(suffix)]
	}
	return base + suffix
}

// SetupWithManager registers the controller with the indexes it lists by.
func (r *TerminalCommandReconciler) SetupWithManager(mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(context.Background(), &wbv1.TerminalCommand{}, indexCommandProfile, func(o client.Object) []string {
		return []string{string(o.(*wbv1.TerminalCommand).Spec.ProfileRef)}
	}); err != nil {
		return fmt.Errorf("indexing commands by profile: %w", err)
	}
	if err := idx.IndexField(context.Background(), &wbv1.TerminalCommand{}, indexCommandSession, func(o client.Object) []string {
		return []string{string(o.(*wbv1.TerminalCommand).Spec.SessionRef)}
	}); err != nil {
		return fmt.Errorf("indexing commands by session: %w", err)
	}
	if err := idx.IndexField(context.Background(), &wbv1.TerminalCommand{}, indexCommandIdemKey, func(o client.Object) []string {
		if k := o.(*wbv1.TerminalCommand).Spec.IdempotencyKey; k != "" {
			return []string{k}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing commands by idempotency key: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&wbv1.TerminalCommand{}).
		Watches(&wbv1.ConsentRequest{}, handler.EnqueueRequestsFromMapFunc(commandOfRequest)).
		Watches(&wbv1.CommandProfile{}, handler.EnqueueRequestsFromMapFunc(r.commandsOf(indexCommandProfile))).
		Watches(&wbv1.TerminalSession{}, handler.EnqueueRequestsFromMapFunc(r.commandsOf(indexCommandSession))).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(r.pendingIn)).
		Named("terminalcommand").
		Complete(r)
}

// commandOfRequest maps a ConsentRequest to the command it was created for.
func commandOfRequest(_ context.Context, o client.Object) []reconcile.Request {
	cr := o.(*wbv1.ConsentRequest)
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: cr.Namespace, Name: string(cr.Spec.Descriptor.CommandRef)}}}
}

// pendingIn maps an Environment change (placement, readiness) to the commands of its
// namespace that still wait for admission.
func (r *TerminalCommandReconciler) pendingIn(ctx context.Context, env client.Object) []reconcile.Request {
	var cmds wbv1.TerminalCommandList
	if err := r.List(ctx, &cmds, client.InNamespace(env.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range cmds.Items {
		c := &cmds.Items[i]
		if wbv1.CommandIsFinal(c.Status.Conditions) {
			continue
		}
		// Pending admission, or admitted under another operational context and not started
		// (admissionSuperseded decides).
		if !isTrueCond(c.Status.Conditions, wbv1.ConditionAdmitted) ||
			c.Status.AdmittedContext != "" && c.Labels[wbv1.EnvironmentLabel] == env.GetName() &&
				meta.FindStatusCondition(c.Status.Conditions, wbv1.ConditionStarted) == nil {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
		}
	}
	return out
}

// commandsOf maps a profile or session to the pending commands naming it.
func (r *TerminalCommandReconciler) commandsOf(index string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var cmds wbv1.TerminalCommandList
		if err := r.List(ctx, &cmds, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "Listing commands", "index", index, "object", o.GetName())
			return nil
		}
		var out []reconcile.Request
		for i := range cmds.Items {
			if !wbv1.CommandIsFinal(cmds.Items[i].Status.Conditions) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&cmds.Items[i])})
			}
		}
		return out
	}
}

// markCommand marks a step of the command's create → outcome path for the benchmarks' span
// breakdown (internal/platform/spans); nothing happens unless a recorder is installed.
func markCommand(cmd *wbv1.TerminalCommand, step string) {
	if spans.Enabled() {
		spans.Mark(cmd.Namespace+"/"+cmd.Name, step)
	}
}

// gitMetadataOf is the profile's git metadata policy as the operator reviews it (the
// default spelled out).
func gitMetadataOf(s *wbv1.CommandProfileSpec) wbv1.GitMetadataPolicy {
	if s.GitMetadata == "" {
		return wbv1.GitMetadataReadOnly
	}
	return s.GitMetadata
}

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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// ActionRunReconciler admits ActionRuns: it decides each run with actions.Authorize
// (catalog, signature, signer scope, posture, parameters), checks that the Environment's
// node publishes the class as enforceable, holds C7 runs for an operator's consent, and
// binds admitted runs to the Environment's node. The node agent decides again before it
// spawns anything; every run ends in exactly one recorded outcome.
type ActionRunReconciler struct{ ConsentGate }

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=actionruns,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=actionruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=consentrequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=consentgrants,verbs=get;list;watch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=actioncatalogs,verbs=get;list;watch;create

// actionRunOwned is what the manager writes of a run's status (see ActionRunStatus): the
// outcome fields only for a run it refused before admission.
func actionRunOwned(s *wbv1.ActionRunStatus) wbv1.ActionRunStatus {
	out := wbv1.ActionRunStatus{
		Phase: s.Phase, Class: s.Class, SpecDigest: s.SpecDigest, ParamsDigest: s.ParamsDigest, Argv: s.Argv,
		TimeoutSeconds: s.TimeoutSeconds, Signer: s.Signer, Unauthorized: s.Unauthorized, Observation: s.Observation,
		ConsentRequestRef: s.ConsentRequestRef, CatalogDeltaRef: s.CatalogDeltaRef, ObservedGeneration: s.ObservedGeneration,
		Conditions: ownedConditions(s.Conditions, wbv1.ConditionAdmitted, wbv1.ConditionReconciling, wbv1.ConditionStalled),
	}
	if !isTrueCond(s.Conditions, wbv1.ConditionAdmitted) {
		out.Refusal, out.CompletionTime = s.Refusal, s.CompletionTime
		out.Conditions = ownedConditions(s.Conditions, wbv1.ConditionAdmitted, wbv1.ConditionCompleted, wbv1.ConditionReconciling, wbv1.ConditionStalled)
	}
	return out
}

type runPass struct {
	run       *wbv1.ActionRun
	cur, next wbv1.ActionRunStatus
	all       []metav1.Condition
	result    ctrl.Result
}

func (p *runPass) set(c metav1.Condition) { setCondition(&p.next.Conditions, &p.all, c) }

func (p *runPass) hold(reason, msg string) {
	p.set(cond(wbv1.ConditionAdmitted, false, reason, msg, p.run.Generation))
}

func (p *runPass) requeueAfter(d time.Duration) { p.result.RequeueAfter = d }

func (r *ActionRunReconciler) refuse(p *runPass, rf *actuation.Refusal) {
	msg := rf.Message
	p.next.Refusal = &wbv1.Refusal{Code: string(rf.Code), Message: truncate(msg, 1024)}
	p.next.CompletionTime = &metav1.Time{Time: r.Now()}
	p.set(cond(wbv1.ConditionAdmitted, false, wbv1.ReasonRefused, truncate(string(rf.Code)+": "+msg, 32768), p.run.Generation))
	p.set(cond(wbv1.ConditionCompleted, true, wbv1.ReasonRefused, truncate(string(rf.Code)+": "+msg, 32768), p.run.Generation))
	refusals.WithLabelValues("ActionRun", string(rf.Code)).Inc()
}

func (r *ActionRunReconciler) finish(ctx context.Context, p *runPass) (ctrl.Result, error) {
	run := p.run
	p.next.Phase = wbv1.ActionRunPhaseFor(p.all)
	for _, hc := range wbv1.HealthConditions(wbv1.ActionRunHealth(p.next.Phase), string(p.next.Phase), "run is "+string(p.next.Phase), run.Generation) {
		p.set(hc)
	}
	wrote, err := applyStatus(ctx, r.Client, "actionrun", run, p.cur, p.next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote && p.cur.Phase != p.next.Phase {
		phaseTransitions.WithLabelValues("ActionRun", string(p.next.Phase)).Inc()
		evType, note := corev1.EventTypeNormal, fmt.Sprintf("Run is %s", p.next.Phase)
		if p.next.Refusal != nil && !isTrueCond(p.all, wbv1.ConditionAdmitted) {
			evType, note = corev1.EventTypeWarning, fmt.Sprintf("Run refused: %s", p.next.Refusal.Code)
		}
		r.Recorder.Eventf(run, nil, evType, string(p.next.Phase), "Admit", "%s", note)
	}
	return p.result, nil
}

// Reconcile implements reconcile.Reconciler.
func (r *ActionRunReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var run wbv1.ActionRun
	if err := r.Get(ctx, req.NamespacedName, &run); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	p := &runPass{run: &run, cur: actionRunOwned(&run.Status), next: actionRunOwned(&run.Status),
		all: append([]metav1.Condition(nil), run.Status.Conditions...)}
	if wbv1.ActionRunIsFinal(run.Status.Conditions) || isTrueCond(run.Status.Conditions, wbv1.ConditionAdmitted) {
		if wbv1.ActionRunIsFinal(run.Status.Conditions) {
			p.next.Observation = convert.ObservedOutcome(p.next.Observation, &run.Status)
		}
		return r.finish(ctx, p)
	}
	p.next.ObservedGeneration = run.Generation
	if run.Spec.DesiredState == wbv1.CommandDesiredCancelled {
		msg := "cancelled before it was admitted"
		p.next.CompletionTime = &metav1.Time{Time: r.Now()}
		p.set(cond(wbv1.ConditionAdmitted, false, wbv1.ReasonCancelled, msg, run.Generation))
		p.set(cond(wbv1.ConditionCompleted, true, wbv1.ReasonCancelled, msg, run.Generation))
		return r.finish(ctx, p)
	}
	if err := r.gate(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	return r.finish(ctx, p)
}

func (r *ActionRunReconciler) gate(ctx context.Context, p *runPass) error {
	run := p.run
	young := r.Now().Sub(run.CreationTimestamp.Time) < ReferenceGrace
	var cat wbv1.ActionCatalog
	if found, rf, err := readReference(ctx, r.Client, run.Namespace, reference{kind: "ActionCatalog", what: "catalog", name: string(run.Spec.CatalogRef),
		waiting: ReasonWaitingForCatalog, missing: actuation.CodeCatalogEntryMissing, field: "spec.catalogRef"}, &cat, "run "+run.Name, young, p); !found {
		if rf != nil {
			r.refuse(p, rf)
		}
		return err
	}
	signers, pol, err := convert.ActionAuthority(ctx, r.Client)
	if err != nil {
		return err
	}
	in, err := convert.AuthorizeRun(&cat, run, signers, pol)
	if err != nil {
		return err
	}
	d := actions.Authorize(in)
	if !d.Allowed {
		r.refuse(p, d.Refusal)
		return nil
	}
	p.next.Class = wbv1.ActionClass(d.Action.Class)
	p.next.SpecDigest = wbv1.Digest(d.SpecDigest)
	p.next.ParamsDigest = wbv1.Digest(d.ParamsDigest)
	p.next.Argv = d.Argv
	p.next.TimeoutSeconds = d.TimeoutSeconds
	p.next.Signer = d.Signer
	p.next.Unauthorized = d.Unauthorized
	p.next.Observation = convert.ActionObservation(d.Observation)

	var env wbv1.Environment
	if found, rf, err := readReference(ctx, r.Client, run.Namespace, environmentReference(run.Spec.EnvironmentRef), &env, "run "+run.Name, young, p); !found {
		if rf != nil {
			r.refuse(p, rf)
		}
		return err
	}
	if rf := environmentUnusable(&env); rf != nil {
		r.refuse(p, rf)
		return nil
	}
	node := placedNode(&env, p)
	if node == "" {
		return nil
	}
	var wn wbv1.WorkbenchNode
	if err := r.Get(ctx, types.NamespacedName{Name: node}, &wn); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading WorkbenchNode %s for run %s: %w", node, run.Name, err)
	}
	if !nodeSupports(&wn, d.Action.Class) {
		r.refuse(p, actuation.Refuse(actuation.CodeActionClassUnavailable, "", "node %s does not publish class %s (%s) as enforceable; the run fails closed",
			node, enforcedClass(d.Action.Class), actions.SeedName(enforcedClass(d.Action.Class))))
		return nil
	}
	reason, by := ReasonAdmittedByCatalog, "catalog "+cat.Name
	if d.Action.Class == actions.ClassOperatorGated {
		granted, err := r.consent(ctx, p, &env, &cat)
		if err != nil || !granted {
			return err
		}
		reason, by = wbv1.ReasonAdmittedByConsent, "consent "+p.next.ConsentRequestRef
	}
	if err := bindToNode(ctx, r.Client, "ActionRun", run, node, env.Name); err != nil {
		return err
	}
	p.set(cond(wbv1.ConditionAdmitted, true, reason, "admitted by "+by+" for node "+node, run.Generation))
	return nil
}

// consent holds a C7 run for an operator: one ConsentRequest bound to the run's UID and
// rendered argv, options deny and allow-once. It returns true once the request is Granted.
func (r *ActionRunReconciler) consent(ctx context.Context, p *runPass, env *wbv1.Environment, cat *wbv1.ActionCatalog) (bool, error) {
	run := p.run
	name := truncateName(run.Name, "-consent-"+shortUID(run.UID))
	var cr wbv1.ConsentRequest
	err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: name}, &cr)
	switch {
	case apierrors.IsNotFound(err):
		root := wbv1.RootName("workspace")
		if len(env.Spec.Roots) > 0 {
			root = env.Spec.Roots[0].Name
		}
		cwd := wbv1.CwdAddress{Root: root}
		cr = wbv1.ConsentRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: run.Namespace, Labels: withCorrelation(map[string]string{wbv1.EnvironmentLabel: env.Name}, run)},
			Spec: wbv1.ConsentRequestSpec{
				Descriptor: wbv1.ConsentDescriptor{
					Requester:  run.Spec.CreatedBy,
					Capability: wbv1.CapabilityActionRun, CommandRef: wbv1.ObjectName(run.Name), CommandUID: run.UID,
					ProfileRef: wbv1.ObjectName(cat.Name), EnvironmentRef: wbv1.ObjectName(env.Name),
					Argv: p.next.Argv, ArgvDigest: wbv1.Digest(actuation.ArgvDigest(cat.Name, p.next.Argv, convert.Cwd(cwd))), Cwd: cwd,
					RememberedSpan: "allow-once admits only ActionRun " + run.Name + " (uid " + string(run.UID) + ") of action " + run.Spec.ActionID + " in catalog " + cat.Name + " (" + string(p.next.SpecDigest) + ")",
					SafetyCaps:     wbv1.SafetyCaps{TimeoutSeconds: p.next.TimeoutSeconds, OutputBytes: 0, Egress: "Deny", Credentials: "Denied"},
					ReasonCode:     string(actuation.CodeConsentRequired),
				},
				Options: []wbv1.ConsentScope{wbv1.ConsentDeny, wbv1.ConsentAllowOnce, wbv1.ConsentAddToCatalog},
			},
		}
		if ref, err := r.settle(ctx, &cr); err != nil || ref != nil {
			if ref != nil {
				r.refuse(p, ref)
			}
			return false, err
		}
		log.FromContext(ctx).Info("Creating consent request for operator-gated run", "run", client.ObjectKeyFromObject(run), "request", name)
		if err := r.Create(ctx, &cr); err != nil {
			return false, fmt.Errorf("creating ConsentRequest %s for run %s: %w", name, run.Name, err)
		}
	case err != nil:
		return false, fmt.Errorf("reading ConsentRequest %s/%s: %w", run.Namespace, name, err)
	case cr.Spec.Descriptor.CommandUID != run.UID || cr.Spec.Descriptor.Capability != wbv1.CapabilityActionRun:
		return false, fmt.Errorf("ConsentRequest %s/%s does not bind run %s", run.Namespace, name, run.Name)
	}
	p.next.ConsentRequestRef = cr.Name
	switch wbv1.ConsentDecisionFor(cr.Status.Conditions) {
	case wbv1.DecisionGranted:
		var g wbv1.ConsentGrant
		if err := r.Get(ctx, types.NamespacedName{Namespace: cr.Namespace, Name: cr.Status.GrantRef}, &g); err != nil {
			if apierrors.IsNotFound(err) {
				r.refuse(p, actuation.Refuse(actuation.CodeConsentScopeInvalid, "", "the grant %s that decided %s no longer exists", cr.Status.GrantRef, cr.Name))
				return false, nil
			}
			return false, fmt.Errorf("reading ConsentGrant %s/%s of run %s: %w", cr.Namespace, cr.Status.GrantRef, run.Name, err)
		}
		if g.Spec.Scope == wbv1.ConsentAddToCatalog {
			return false, r.proposeDelta(ctx, p, cat, &g)
		}
		if !equalStrings(cr.Spec.Descriptor.Argv, p.next.Argv) {
			r.refuse(p, actuation.Refuse(actuation.CodeConsentScopeInvalid, "", "the consent covered another argv than the run renders now"))
			return false, nil
		}
		return true, nil
	case wbv1.DecisionDenied:
		r.refuse(p, actuation.Refuse(actuation.CodeConsentDenied, "", "an operator denied this run"))
	case wbv1.DecisionExpired:
		r.refuse(p, actuation.Refuse(actuation.CodeConsentExpired, "", "no operator decided before the request's timeout"))
	case wbv1.DecisionRevoked:
		r.refuse(p, actuation.Refuse(actuation.CodeConsentRevoked, "", "the grant was revoked before the run was admitted"))
	default:
		p.hold(wbv1.ReasonAwaitingConsent, fmt.Sprintf("%s: class C7 (operator-gated-spawn) runs only with an operator's consent; waiting on %s", actuation.CodeConsentRequired, cr.Name))
	}
	return false, nil
}

// Labels of a catalog proposed by an "add to catalog" consent.
const (
	// DeltaOfLabel names the catalog a proposal was computed from.
	DeltaOfLabel = "workbench.sensorium.dev/catalog-delta-of"
	// DeltaRunLabel names the run whose consent proposed it.
	DeltaRunLabel = "workbench.sensorium.dev/catalog-delta-run"
)

// proposeDelta answers an "add to catalog" grant: it creates (once) an unsigned
// ActionCatalog whose spec is actions.CatalogDelta of the run's catalog, names it in
// status.catalogDeltaRef, and refuses the run itself (action-catalog-unauthorized): the
// proposal runs nothing until a signer signs it, and this run is never admitted by it.
func (r *ActionRunReconciler) proposeDelta(ctx context.Context, p *runPass, cat *wbv1.ActionCatalog, g *wbv1.ConsentGrant) error {
	run := p.run
	base, _, err := convert.ActionCatalog(cat)
	if err != nil {
		return err
	}
	delta, rf := actions.CatalogDelta(base, run.Spec.ActionID)
	if rf != nil {
		r.refuse(p, rf)
		return nil
	}
	spec, err := convert.ActionCatalogSpec(delta)
	if err != nil {
		return fmt.Errorf("proposing a catalog for run %s: %w", run.Name, err)
	}
	name := truncateName(cat.Name, "-delta-"+shortUID(run.UID))
	proposal := &wbv1.ActionCatalog{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: run.Namespace,
			Labels:      map[string]string{DeltaOfLabel: truncateLabel(cat.Name), DeltaRunLabel: truncateLabel(run.Name)},
			Annotations: map[string]string{DeltaOfLabel: cat.Name + "@" + string(p.next.SpecDigest), DeltaRunLabel: run.Name + " (uid " + string(run.UID) + "), grant " + g.Name + " by " + g.Spec.Operator}},
		Spec: spec,
	}
	switch err := r.Create(ctx, proposal); {
	case apierrors.IsAlreadyExists(err):
		var cur wbv1.ActionCatalog
		if err := r.Get(ctx, client.ObjectKeyFromObject(proposal), &cur); err != nil {
			return fmt.Errorf("reading proposed ActionCatalog %s for run %s: %w", name, run.Name, err)
		}
		if cur.Labels[DeltaRunLabel] != truncateLabel(run.Name) {
			r.refuse(p, actuation.Refuse(actuation.CodeConsentScopeInvalid, "", "catalog %s exists and is not this run's proposal", name))
			return nil
		}
	case err != nil:
		return fmt.Errorf("creating proposed ActionCatalog %s for run %s: %w", name, run.Name, err)
	default:
		log.FromContext(ctx).Info("Proposed an unsigned catalog from an add-to-catalog consent", "run", client.ObjectKeyFromObject(run), "catalog", name, "grant", g.Name)
	}
	p.next.CatalogDeltaRef = name
	r.refuse(p, actuation.Refuse(actuation.CodeActionCatalogUnauthorized, "", "an operator chose add-to-catalog: catalog %s proposes action %s without a prompt and runs nothing until a signer signs it; this run is not admitted",
		name, run.Spec.ActionID))
	return nil
}

func truncateLabel(s string) string {
	if len(s) > 63 {
		s = strings.TrimRight(s[:63], "-.")
	}
	return s
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// SetupWithManager registers the controller: consent decisions, catalogs, signers, the
// policy and placement wake the runs still waiting for admission.
func (r *ActionRunReconciler) SetupWithManager(mgr ctrl.Manager) error {
	pending := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var runs wbv1.ActionRunList
		opts := []client.ListOption{}
		if o.GetNamespace() != "" {
			opts = append(opts, client.InNamespace(o.GetNamespace()))
		}
		if err := r.List(ctx, &runs, opts...); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range runs.Items {
			x := &runs.Items[i]
			if !wbv1.ActionRunIsFinal(x.Status.Conditions) && !isTrueCond(x.Status.Conditions, wbv1.ConditionAdmitted) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(x)})
			}
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&wbv1.ActionRun{}).
		Watches(&wbv1.ConsentRequest{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			cr := o.(*wbv1.ConsentRequest)
			if cr.Spec.Descriptor.Capability != wbv1.CapabilityActionRun {
				return nil
			}
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: cr.Namespace, Name: string(cr.Spec.Descriptor.CommandRef)}}}
		})).
		Watches(&wbv1.ActionCatalog{}, pending).
		Watches(&wbv1.Environment{}, pending).
		Watches(&wbv1.ActionSigner{}, pending).
		Watches(&wbv1.WorkbenchPolicy{}, pending).
		Named("actionrun").
		Complete(r)
}

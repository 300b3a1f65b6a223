package controllers

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// gatePass is what the admission gates of TerminalCommands and ActionRuns share of a pass:
// holding an object not admitted now, and when to look at it again.
type gatePass interface {
	hold(reason, msg string)
	requeueAfter(d time.Duration)
}

// reference is an object a command or run names, as its gate reads it.
type reference struct {
	kind    string         // the kind read, for errors: "TerminalSession"
	what    string         // the object as a message names it: "session"
	name    string         // its name, in the namespace of the object naming it
	waiting string         // the hold reason while it does not exist yet
	missing actuation.Code // the refusal once it is still missing after ReferenceGrace
	field   string         // the spec field naming it, for the refusal
}

// readReference reads the object ref names into obj; found is true only when it was read.
// A missing object is waited for while the pass's object is younger than ReferenceGrace
// (GitOps applies objects in any order): p holds with ref.waiting and looks again after
// ReferenceGrace. After that it is refused: the refusal (ref.missing, "<what> <name> does
// not exist") is returned for the caller's refuse. of names the reader for errors.
func readReference(ctx context.Context, c client.Reader, namespace string, ref reference, obj client.Object, of string, young bool, p gatePass) (found bool, refusal *actuation.Refusal, err error) {
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.name}, obj); err != nil {
		if !apierrors.IsNotFound(err) {
			return false, nil, fmt.Errorf("reading %s of %s: %w", ref.kind, of, err)
		}
		if young {
			p.hold(ref.waiting, ref.what+" "+ref.name+" does not exist yet")
			p.requeueAfter(ReferenceGrace)
			return false, nil, nil
		}
		return false, actuation.Refuse(ref.missing, ref.field, "%s %s does not exist", ref.what, ref.name), nil
	}
	return true, nil, nil
}

// environmentUnusable is the refusal of a command or run into an environment that will
// never run anything again (failed, expired, closed or draining); nil otherwise.
func environmentUnusable(env *wbv1.Environment) *actuation.Refusal {
	switch env.Status.Phase {
	case wbv1.EnvironmentFailed, wbv1.EnvironmentExpired, wbv1.EnvironmentClosed, wbv1.EnvironmentDraining:
		return actuation.Refuse(actuation.CodeEnvironmentUnavailable, "spec.environmentRef", "environment %s is %s", env.Name, env.Status.Phase)
	}
	return nil
}

// placedNode is the node env is placed on; "" when it is not placed yet, and then p holds
// (waiting for placement) and looks again after PlacementRecheck.
func placedNode(env *wbv1.Environment, p gatePass) string {
	node := env.Status.NodeName
	if node == "" {
		p.hold(wbv1.ReasonWaitingForPlacement, "environment "+env.Name+" is not placed on a node yet")
		p.requeueAfter(PlacementRecheck)
	}
	return node
}

// bindToNode labels an admitted object (kind) with the node and environment it is admitted
// for, under an optimistic lock; nothing is written when it carries both labels already.
func bindToNode(ctx context.Context, c client.Client, kind string, obj client.Object, node, env string) error {
	labels := obj.GetLabels()
	if labels[wbv1.NodeLabel] == node && labels[wbv1.EnvironmentLabel] == env {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[wbv1.NodeLabel] = node
	labels[wbv1.EnvironmentLabel] = env
	obj.SetLabels(labels)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("binding %s %s to node %s: %w", kind, obj.GetName(), node, err)
	}
	return nil
}

// environmentReference is the Environment a command's session or a run names: waited for
// as placement, environment-unavailable once missing after ReferenceGrace.
func environmentReference(name wbv1.ObjectName) reference {
	return reference{kind: "Environment", what: "environment", name: string(name),
		waiting: wbv1.ReasonWaitingForPlacement, missing: actuation.CodeEnvironmentUnavailable, field: "spec.environmentRef"}
}

// ConsentGate is what the reconcilers that admit an actuation and may ask an operator for
// it (TerminalCommand, ActionRun) are built from.
type ConsentGate struct {
	client.Client
	Recorder events.EventRecorder
	Now      func() time.Time
	// ConsentTimeoutSeconds overrides DefaultConsentTimeout.
	ConsentTimeoutSeconds int64
	// Cooldown remembers denied argv per identity (shared with the consent request controller).
	Cooldown *actuation.DenyCooldown
}

// settle completes a new ConsentRequest before it is created: its timeout
// (ConsentTimeoutSeconds, else DefaultConsentTimeout) and the options the namespace's policy
// and the deny cooldown leave (consentGate). A refusal means no operator may be asked.
func (g *ConsentGate) settle(ctx context.Context, cr *wbv1.ConsentRequest) (*actuation.Refusal, error) {
	cr.Spec.TimeoutSeconds = DefaultConsentTimeout
	if g.ConsentTimeoutSeconds > 0 {
		cr.Spec.TimeoutSeconds = g.ConsentTimeoutSeconds
	}
	opts, ref, err := consentGate(ctx, g.Client, g.Cooldown, cr.Namespace, &cr.Spec.Descriptor, cr.Spec.Options, g.Now())
	if err != nil || ref != nil {
		return ref, err
	}
	cr.Spec.Options = opts
	return nil, nil
}

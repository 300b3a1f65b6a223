package webhooks

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// +kubebuilder:webhook:path=/mutate-workbench-sensorium-dev-v1alpha1-terminalcommand,mutating=true,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=terminalcommands,verbs=create,versions=v1alpha1,name=mterminalcommand.workbench.sensorium.dev,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded

// TerminalCommandBinder binds a command to its node at creation (issue 13, "one hop"): it
// resolves session → environment → node from the manager's informer cache and sets the
// node and environment labels, so the node agent sees the command from its first watch event
// and decides admission itself (internal/nodeagent/agent, fast path) instead of waiting for
// the manager's gate to bind it. It also adds the cleanup finalizer the manager would
// otherwise add right after creation (a second metadata write racing the node).
//
// Labels a client sent are never trusted: the node and environment labels are overwritten
// with what the cache resolves, or removed when nothing resolves yet (then the gate binds
// the command later, as before). Nothing here admits anything: the labels only route the
// command; the node re-runs admission against the effective profile and the environment's
// recorded node before it starts anything.
//
// It is also where a create is validated: Default first runs
// TerminalCommandValidator.ValidateCreate (the same rules, not a copy) and refuses with its
// error, so a create costs the API server one webhook call, not a mutating and then a
// validating one. A validating webhook would see the object after every mutating webhook;
// this one is registered with reinvocationPolicy IfNeeded, so when a later mutating webhook
// changes the object the API server calls it again and the rules see that change too. Nothing
// depends on this alone: the manager's gate and the node re-check the command against the
// live profile before anything runs.
type TerminalCommandBinder struct {
	Reader client.Reader
	// Validator holds the create rules (ValidateCreate).
	Validator TerminalCommandValidator
}

// Default implements admission.Defaulter.
func (b TerminalCommandBinder) Default(ctx context.Context, obj *wbv1.TerminalCommand) error {
	if _, err := b.Validator.ValidateCreate(ctx, obj); err != nil {
		return err
	}
	node, env, err := b.resolve(ctx, obj)
	if err != nil {
		return err
	}
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	delete(obj.Labels, wbv1.NodeLabel)
	delete(obj.Labels, wbv1.EnvironmentLabel)
	if node != "" {
		obj.Labels[wbv1.NodeLabel] = node
		obj.Labels[wbv1.EnvironmentLabel] = env
	}
	controllerutil.AddFinalizer(obj, wbv1.CleanupFinalizer)
	return nil
}

// resolve names the node and environment a new command belongs to ("" when the session or
// environment does not exist yet, is over, or is not placed).
func (b TerminalCommandBinder) resolve(ctx context.Context, obj *wbv1.TerminalCommand) (string, string, error) {
	var sess wbv1.TerminalSession
	if err := b.Reader.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: string(obj.Spec.SessionRef)}, &sess); err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", nil
		}
		return "", "", fmt.Errorf("reading TerminalSession %s/%s of a new command: %w", obj.Namespace, obj.Spec.SessionRef, err)
	}
	if wbv1.SessionPhaseIsFinal(sess.Status.Phase) {
		return "", "", nil
	}
	var env wbv1.Environment
	if err := b.Reader.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: string(sess.Spec.EnvironmentRef)}, &env); err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", nil
		}
		return "", "", fmt.Errorf("reading Environment %s/%s of a new command: %w", obj.Namespace, sess.Spec.EnvironmentRef, err)
	}
	if env.Status.NodeName == "" || env.Status.Phase != wbv1.EnvironmentReady {
		return "", "", nil
	}
	return env.Status.NodeName, env.Name, nil
}

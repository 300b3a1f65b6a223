package client

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// EnvironmentRequest is what a caller asks for when creating an environment (the CLI's
// flags and the MCP tool's input schema are both this type).
type EnvironmentRequest struct {
	Name    string `json:"name" jsonschema:"name of the Environment (DNS-1123)"`
	Backend string `json:"backend,omitempty" jsonschema:"backend: host-local, fixture-copy.v1 or qemu-microvm.v1 (default host-local)"`
	// Roots maps root names to a node directory (hostPath for host-local, source for
	// fixture-copy.v1) or to "" for a directory inside a VM guest.
	Roots          map[string]string `json:"roots,omitempty" jsonschema:"root name to node directory (hostPath for host-local, source for fixture-copy.v1, empty inside a VM); optional when a source (git, archive, oci) is given"`
	ImageRef       string            `json:"imageRef,omitempty" jsonschema:"ImageManifest name (VM backends)"`
	IsolationClass string            `json:"isolationClass,omitempty" jsonschema:"required isolation class, e.g. emulated-vm or hardware-vm"`
	TTLSeconds     int64             `json:"ttlSeconds,omitempty" jsonschema:"seconds after which the environment expires (at least 60)"`
	// Sources (issue 28): at most one; the node materializes it into root SourceRoot.
	Sources
}

// Environment builds the object for r.
func (r EnvironmentRequest) Environment(namespace string) (*wbv1.Environment, error) {
	if r.Name == "" {
		return nil, Usage("an environment needs a name")
	}
	src, err := r.root()
	if err != nil {
		return nil, err
	}
	if len(r.Roots) == 0 && src == nil {
		return nil, Usage("an environment needs at least one root (NAME=DIR) or a source (git, archive, oci)")
	}
	backend := wbv1.BackendID(r.Backend)
	if backend == "" {
		backend = wbv1.BackendHostLocal
		if src != nil {
			backend = wbv1.BackendFixtureCopy // a sourced root is a node-managed copy
		}
	}
	e := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: namespace}, Spec: wbv1.EnvironmentSpec{Backend: backend}}
	for _, name := range sortedKeys(r.Roots) {
		root := wbv1.EnvironmentRoot{Name: wbv1.RootName(name)}
		if dir := r.Roots[name]; dir != "" {
			switch backend {
			case wbv1.BackendFixtureCopy:
				root.Source = &dir
			default:
				root.HostPath = &dir
			}
		}
		e.Spec.Roots = append(e.Spec.Roots, root)
	}
	if src != nil {
		if _, dup := r.Roots[string(src.Name)]; dup {
			return nil, Usage("root %s is named both by a NAME=DIR root and by the source", src.Name)
		}
		e.Spec.Roots = append(e.Spec.Roots, *src)
	}
	if r.ImageRef != "" {
		e.Spec.ImageRef = &r.ImageRef
	}
	if r.IsolationClass != "" {
		ic := wbv1.IsolationClass(r.IsolationClass)
		e.Spec.Requirements = &wbv1.EnvironmentRequirements{IsolationClass: &ic}
	}
	if r.TTLSeconds > 0 {
		e.Spec.TTLSeconds = &r.TTLSeconds
	}
	return e, nil
}

// EnvironmentProgress is one observed step of an environment on its way to Ready.
type EnvironmentProgress struct {
	Phase   wbv1.EnvironmentPhase
	Node    string
	Reason  string // reason of the newest changed condition
	Message string
	// Step counts the distinct states seen so far (for a progress display).
	Step int
}

// CreateEnvironment creates e (namespace defaulted to the client's).
func (c *Client) CreateEnvironment(ctx context.Context, e *wbv1.Environment) error {
	if e.Namespace == "" {
		e.Namespace = c.Namespace
	}
	return Wrap("environment "+e.Name, c.Kube.Create(ctx, e))
}

// WaitEnvironmentReady watches environment name until it is Ready (returned) or ends in
// Failed, Expired or Closed (an *Error with the condition's code). progress, if set, is
// called on every change of phase, node or condition.
func (c *Client) WaitEnvironmentReady(ctx context.Context, name string, progress func(EnvironmentProgress)) (*wbv1.Environment, error) {
	e := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
	last, step := "", 0
	err := waitFor(ctx, c, e, &wbv1.EnvironmentList{}, func(e *wbv1.Environment) (bool, error) {
		phase := wbv1.EnvironmentPhaseFor(e.Status.Conditions, e.DeletionTimestamp != nil)
		p := EnvironmentProgress{Phase: phase, Node: e.Status.NodeName}
		if newest := newestCondition(e.Status.Conditions); newest != nil {
			p.Reason, p.Message = newest.Reason, newest.Message
		}
		if p.Phase == "" {
			p.Phase = wbv1.EnvironmentAllocating
		}
		if key := fmt.Sprint(p.Phase, p.Node, p.Reason, p.Message); key != last {
			last, step = key, step+1
			p.Step = step
			if progress != nil {
				progress(p)
			}
		}
		switch phase {
		case wbv1.EnvironmentReady:
			return true, nil
		case wbv1.EnvironmentFailed, wbv1.EnvironmentExpired, wbv1.EnvironmentClosed, wbv1.EnvironmentDraining:
			msg := p.Message
			if ready := meta.FindStatusCondition(e.Status.Conditions, wbv1.ConditionReady); ready != nil {
				msg = ready.Message
			}
			code := codeFromText(msg, "environment-unavailable")
			return false, refused("environment "+name, code, fmt.Sprintf("environment is %s: %s", phase, msg))
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// ListEnvironments lists the namespace's environments.
func (c *Client) ListEnvironments(ctx context.Context) ([]wbv1.Environment, error) {
	var l wbv1.EnvironmentList
	if err := c.Kube.List(ctx, &l, ctrlclient.InNamespace(c.Namespace)); err != nil {
		return nil, Wrap("environments", err)
	}
	return l.Items, nil
}

// DeleteEnvironment deletes environment name; with wait it returns once the object is
// gone (the node agent has torn it down).
func (c *Client) DeleteEnvironment(ctx context.Context, name string, wait bool) error {
	e := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
	if err := c.Kube.Delete(ctx, e); err != nil {
		return Wrap("environment "+name, err)
	}
	if !wait {
		return nil
	}
	err := waitFor(ctx, c, e, &wbv1.EnvironmentList{}, func(*wbv1.Environment) (bool, error) { return false, nil })
	if isGone(err) {
		return nil
	}
	return err
}

// DefaultEnvironment picks the environment to act on when the caller named none: the only
// Ready environment of the namespace.
func (c *Client) DefaultEnvironment(ctx context.Context) (string, error) {
	e, err := c.defaultEnvironment(ctx)
	if err != nil {
		return "", err
	}
	return e.Name, nil
}

// defaultEnvironment is DefaultEnvironment's object, as listed (one request).
func (c *Client) defaultEnvironment(ctx context.Context) (*wbv1.Environment, error) {
	envs, err := c.ListEnvironments(ctx)
	if err != nil {
		return nil, err
	}
	var ready []string
	var only *wbv1.Environment
	for i := range envs {
		e := &envs[i]
		if wbv1.EnvironmentPhaseFor(e.Status.Conditions, e.DeletionTimestamp != nil) == wbv1.EnvironmentReady {
			ready = append(ready, e.Name)
			only = e
		}
	}
	switch len(ready) {
	case 1:
		return only, nil
	case 0:
		return nil, &Error{Class: ClassUnavailable, Code: "environment-unavailable", Message: "no Ready environment in namespace " + c.Namespace + "; create one with `kubectl workbench env create`"}
	}
	return nil, Usage("namespace %s has %d Ready environments (%s): name one with -e", c.Namespace, len(ready), strings.Join(ready, ", "))
}

func newestCondition(conds []metav1.Condition) *metav1.Condition {
	var n *metav1.Condition
	for i := range conds {
		if n == nil || conds[i].LastTransitionTime.After(n.LastTransitionTime.Time) {
			n = &conds[i]
		}
	}
	return n
}

// codeFromText finds a refusal code in a status message, else returns def.
func codeFromText(msg, def string) string {
	if m := codeInText.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return def
}

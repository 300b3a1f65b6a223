package client

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// ConditionRequest is one wait or probe condition with its scope (the CLI's `wait` and
// `probe` flags and the MCP wait/probe tools' input schema).
type ConditionRequest struct {
	Kind         string `json:"kind" jsonschema:"condition kind: terminal.output.since, terminal.output.matches, terminal.quiescent, terminal.command.done, terminal.process.alive, terminal.no-progress, file.exists, file.digest.changed, artifact.present, environment.ready, operation.done"`
	Session      string `json:"session,omitempty" jsonschema:"TerminalSession scope"`
	Command      string `json:"command,omitempty" jsonschema:"TerminalCommand scope"`
	Environment  string `json:"environment,omitempty" jsonschema:"Environment scope (with root and path: a file scope)"`
	Root         string `json:"root,omitempty" jsonschema:"root of a file scope"`
	Path         string `json:"path,omitempty" jsonschema:"path beneath the root of a file scope"`
	Artifact     string `json:"artifact,omitempty" jsonschema:"Artifact scope"`
	Operation    string `json:"operation,omitempty" jsonschema:"Kind/name of a Wait, Probe, FilePatch or TerminalCommand"`
	Pattern      string `json:"pattern,omitempty" jsonschema:"RE2 pattern for terminal.output.matches"`
	SinceSeq     int64  `json:"sinceSeq,omitempty" jsonschema:"event cursor for terminal.output.*"`
	QuietSeconds int32  `json:"quietSeconds,omitempty" jsonschema:"silence window for terminal.quiescent and terminal.no-progress"`
	Digest       string `json:"digest,omitempty" jsonschema:"previous digest for file.digest.changed"`
	// TimeoutSeconds is a wait's deadline (at most 3600) or a probe's timeout.
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty" jsonschema:"a wait's deadline (at most 3600) or a probe's timeout"`
}

func (r ConditionRequest) scopeAndCondition() (*wbv1.Scope, wbv1.WaitCondition, error) {
	cond := wbv1.WaitCondition{Kind: wbv1.ConditionKind(r.Kind)}
	if r.Kind == "" {
		return nil, cond, Usage("name a condition kind (--for)")
	}
	if r.Pattern != "" {
		cond.Pattern = &r.Pattern
	}
	if r.SinceSeq > 0 {
		cond.SinceSeq = &r.SinceSeq
	}
	if r.QuietSeconds > 0 {
		cond.QuietSeconds = &r.QuietSeconds
	}
	if r.Digest != "" {
		d := wbv1.Digest(r.Digest)
		cond.Digest = &d
	}
	s := &wbv1.Scope{}
	n := 0
	set := func(v string, dst **wbv1.ObjectName) {
		if v != "" {
			o := wbv1.ObjectName(v)
			*dst, n = &o, n+1
		}
	}
	if r.Root != "" || r.Path != "" || strings.HasPrefix(r.Kind, "file.") {
		s.File = &wbv1.FileRef{EnvironmentRef: wbv1.ObjectName(r.Environment), Root: wbv1.RootName(r.Root), Path: wbv1.RelativePath(r.Path)}
		n++
	} else {
		set(r.Environment, &s.EnvironmentRef)
	}
	set(r.Session, &s.SessionRef)
	set(r.Command, &s.CommandRef)
	set(r.Artifact, &s.ArtifactRef)
	if r.Operation != "" {
		s.OperationRef, n = &r.Operation, n+1
	}
	if n != 1 {
		return nil, cond, Usage("name exactly one scope (session, command, environment, file, artifact or operation); got %d", n)
	}
	return s, cond, nil
}

// Wait creates a Wait for r and returns it once it is no longer pending. Satisfied is nil
// error; TimedOut, Cancelled and Failed are *Error.
func (c *Client) Wait(ctx context.Context, r ConditionRequest) (*wbv1.Wait, error) {
	scope, cond, err := r.scopeAndCondition()
	if err != nil {
		return nil, err
	}
	deadline := r.TimeoutSeconds
	if deadline <= 0 {
		deadline = 60
	}
	w := &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{GenerateName: "wait-", Namespace: c.Namespace},
		Spec: wbv1.WaitSpec{Scope: scope, Condition: cond, DeadlineSeconds: deadline}}
	if err := c.Kube.Create(ctx, w); err != nil {
		return nil, Wrap("wait", err)
	}
	err = waitFor(ctx, c, w, &wbv1.WaitList{}, func(w *wbv1.Wait) (bool, error) {
		s, _ := wbv1.SummaryOf(w)
		return s.Final, nil
	})
	if err != nil {
		return nil, err
	}
	return w, WaitOutcomeError(w)
}

// WaitOutcomeError is nil for a satisfied wait.
func WaitOutcomeError(w *wbv1.Wait) error {
	obj := "wait " + w.Name
	status := wbv1.WaitConditionStatus(wbv1.WaitSummary(w).Phase)
	switch status {
	case wbv1.WaitSatisfied:
		return nil
	case wbv1.WaitTimedOut:
		return &Error{Object: obj, Class: ClassTimedOut, Message: fmt.Sprintf("condition %s did not hold within %ds (diagnostics: %v)", w.Spec.Condition.Kind, w.Spec.DeadlineSeconds, w.Status.Diagnostics)}
	case wbv1.WaitCancelled:
		return &Error{Object: obj, Class: ClassCancelled, Message: "wait was cancelled"}
	}
	if w.Status.Refusal != nil {
		return refused(obj, w.Status.Refusal.Code, w.Status.Refusal.Message)
	}
	return &Error{Object: obj, Class: ClassRuntime, Message: "wait ended " + string(status)}
}

// ProbeFailed is a probe that ran and found the condition false (exit code 1).
type ProbeFailed struct{ Probe string }

func (e *ProbeFailed) Error() string   { return "probe " + e.Probe + ": condition does not hold" }
func (e *ProbeFailed) ExitStatus() int { return 1 }

// Probe creates a Probe for r and returns it once it has a result: Pass is nil error, Fail
// is *ProbeFailed, Error is *Error with the refusal code.
func (c *Client) Probe(ctx context.Context, r ConditionRequest) (*wbv1.Probe, error) {
	scope, cond, err := r.scopeAndCondition()
	if err != nil {
		return nil, err
	}
	p := &wbv1.Probe{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: c.Namespace},
		Spec: wbv1.ProbeSpec{Scope: scope, Condition: cond, TimeoutSeconds: r.TimeoutSeconds}}
	if err := c.Kube.Create(ctx, p); err != nil {
		return nil, Wrap("probe", err)
	}
	err = waitFor(ctx, c, p, &wbv1.ProbeList{}, func(p *wbv1.Probe) (bool, error) {
		s, _ := wbv1.SummaryOf(p)
		return s.Final, nil
	})
	if err != nil {
		return nil, err
	}
	result := wbv1.ProbeResult(wbv1.ProbeSummary(p).Phase)
	switch result {
	case "Pass":
		return p, nil
	case "Fail":
		return p, &ProbeFailed{Probe: p.Name}
	}
	if p.Status.Refusal != nil {
		return p, refused("probe "+p.Name, p.Status.Refusal.Code, p.Status.Refusal.Message)
	}
	return p, &Error{Object: "probe " + p.Name, Class: ClassRuntime, Message: "probe ended " + string(result)}
}

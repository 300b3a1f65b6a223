// Package mcpserver is the workbench's Model Context Protocol tool server: the agent's half
// of kubectl workbench (environments, commands with output, files, patch proposals, waits,
// probes, screens, events, consent requests to show). It offers no raw terminal input and
// no approval: those stay with operators. Every tool runs through pkg/client as the
// caller's Kubernetes identity (the kubeconfig over stdio; the request's bearer token over
// streamable HTTP), and refusals come back as tool errors carrying the refusal code.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// Version is reported to MCP clients.
const Version = "v1alpha1"

// Caps on what one tool call returns.
const (
	// MaxOutputBytes bounds the command output a run_command result carries.
	MaxOutputBytes = 1 << 20
	// MaxEvents bounds the events one events call returns.
	MaxEvents = 1000
	// MaxRunWait bounds how long run_command and command_result block.
	MaxRunWait = 10 * time.Minute
)

// ClientFunc returns the workbench client acting as the caller of one tool call.
type ClientFunc func(ctx context.Context, req *mcp.CallToolRequest) (*wbclient.Client, error)

// RefusalMeta is the _meta key of a tool error's refusal: {"code","class","message","object"}.
const RefusalMeta = "workbench.sensorium.dev/refusal"

// New builds the server with every tool; clientFor supplies the caller's client per call.
func New(clientFor ClientFunc) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "sensorium-workbench", Version: Version}, nil)
	add(s, clientFor, &mcp.Tool{Name: "list_environments", Description: "List the namespace's environments with backend, phase and node."}, listEnvironments)
	add(s, clientFor, &mcp.Tool{Name: "create_environment", Description: "Create an Environment and wait until it is Ready (or report why not)."}, createEnvironment)
	add(s, clientFor, &mcp.Tool{Name: "run_command", Description: "Run a structured command (argv as data) and return its output, exit code or refusal code. If an operator's consent is needed, returns phase AwaitingConsent with the consent request; call command_result later."}, runCommand)
	add(s, clientFor, &mcp.Tool{Name: "command_result", Description: "Wait for a command created earlier and return its output, exit code or refusal code."}, commandResult)
	add(s, clientFor, &mcp.Tool{Name: "read_file", Description: "Read a bounded window of one file of an environment root."}, readFile)
	add(s, clientFor, &mcp.Tool{Name: "snapshot_files", Description: "List files beneath a root path with types, sizes and sha256 digests."}, snapshotFiles)
	add(s, clientFor, &mcp.Tool{Name: "propose_patch", Description: "Propose a unified diff to an environment root; an operator approves or rejects it."}, proposePatch)
	add(s, clientFor, &mcp.Tool{Name: "wait", Description: "Wait (bounded) for a condition on a session, command, environment, file or artifact. Silence is reported as diagnostics, never as a kill."}, waitTool)
	add(s, clientFor, &mcp.Tool{Name: "probe", Description: "Check a condition once, now (Pass or Fail)."}, probeTool)
	add(s, clientFor, &mcp.Tool{Name: "screen", Description: "The current screen of a terminal session (rows of text, cursor, digest)."}, screenTool)
	add(s, clientFor, &mcp.Tool{Name: "events", Description: "Events of a terminal session after a sequence number (output as UTF-8 text, gaps marked)."}, eventsTool)
	add(s, clientFor, &mcp.Tool{Name: "run_action", Description: "Run one action of an ActionCatalog (an ActionRun) and return its phase, exit code or refusal code; AwaitingConsent with the consent request when an operator must decide. The correlation id (supplied or generated) labels the run, its consent request and its artifacts."}, runAction) // run_action.go
	add(s, clientFor, &mcp.Tool{Name: "list_consent_requests", Description: "Consent requests of the namespace, with who may approve them. Approving is for operators, not this server."}, listConsent)
	return s
}

// ServeStdio serves the tools over stdin/stdout as cl's identity until ctx ends or the
// client disconnects.
func ServeStdio(ctx context.Context, cl *wbclient.Client, in io.Reader, out io.Writer) error {
	s := New(func(context.Context, *mcp.CallToolRequest) (*wbclient.Client, error) { return cl, nil })
	t := &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}}
	err := s.Run(ctx, t)
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// add registers a typed tool whose handler gets the caller's client; an error becomes a
// tool error with the refusal code in its text and in _meta.
func add[In, Out any](s *mcp.Server, clientFor ClientFunc, t *mcp.Tool, fn func(context.Context, *wbclient.Client, In) (Out, error)) {
	mcp.AddTool(s, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		cl, err := clientFor(ctx, req)
		if err != nil {
			return toolError(err), zero, nil
		}
		out, err := fn(ctx, cl, in)
		if err != nil {
			return toolError(err), out, nil
		}
		return nil, out, nil
	})
}

func toolError(err error) *mcp.CallToolResult {
	var e *wbclient.Error
	if !errors.As(err, &e) {
		var exit *wbclient.ExitError
		if errors.As(err, &exit) {
			e = &wbclient.Error{Class: "exit", Message: exit.Error()}
		} else if w, ok := wbclient.Wrap("", err).(*wbclient.Error); ok {
			e = w
		}
	}
	text := fmt.Sprintf("error [%s]: %s", e.Class, e.Error())
	if e.Code != "" {
		text = fmt.Sprintf("refused [%s, %s]: %s", e.Code, e.Class, e.Error())
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}},
		Meta: mcp.Meta{RefusalMeta: map[string]any{"code": e.Code, "class": string(e.Class), "message": e.Message, "object": e.Object}}}
}

// EnvironmentSummary is one environment in tool results.
type EnvironmentSummary struct {
	Name    string `json:"name"`
	Backend string `json:"backend"`
	Phase   string `json:"phase"`
	Node    string `json:"node,omitempty"`
}

func summarize(e *wbv1.Environment) EnvironmentSummary {
	return EnvironmentSummary{Name: e.Name, Backend: string(e.Spec.Backend), Phase: string(wbv1.EnvironmentPhaseFor(e.Status.Conditions, e.DeletionTimestamp != nil)), Node: e.Status.NodeName}
}

// NoInput is the input of tools without parameters.
type NoInput struct{}

// Environments is list_environments' result.
type Environments struct {
	Environments []EnvironmentSummary `json:"environments"`
}

func listEnvironments(ctx context.Context, cl *wbclient.Client, _ NoInput) (Environments, error) {
	envs, err := cl.ListEnvironments(ctx)
	out := Environments{Environments: []EnvironmentSummary{}}
	for i := range envs {
		out.Environments = append(out.Environments, summarize(&envs[i]))
	}
	return out, err
}

func createEnvironment(ctx context.Context, cl *wbclient.Client, r wbclient.EnvironmentRequest) (EnvironmentSummary, error) {
	e, err := r.Environment(cl.Namespace)
	if err != nil {
		return EnvironmentSummary{}, err
	}
	if err := cl.CreateEnvironment(ctx, e); err != nil {
		return EnvironmentSummary{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, MaxRunWait)
	defer cancel()
	ready, err := cl.WaitEnvironmentReady(ctx, e.Name, nil)
	if err != nil {
		return summarize(e), err
	}
	return summarize(ready), nil
}

// RunResult is run_command's and command_result's result, with the consent request when
// the command waits for an operator.
type RunResult struct {
	wbclient.RunResult
	Consent *wbclient.ConsentInfo `json:"consent,omitempty"`
}

func runCommand(ctx context.Context, cl *wbclient.Client, r wbclient.RunRequest) (RunResult, error) {
	cmd, err := cl.PrepareCommand(ctx, r)
	if err != nil {
		return RunResult{}, err
	}
	if err := cl.CreateCommand(ctx, cmd); err != nil {
		return RunResult{}, err
	}
	return followCommand(ctx, cl, cmd)
}

// CommandRef names a command created earlier.
type CommandRef struct {
	Command string `json:"command" jsonschema:"TerminalCommand name (from run_command)"`
}

func commandResult(ctx context.Context, cl *wbclient.Client, r CommandRef) (RunResult, error) {
	cmd, err := cl.GetCommand(ctx, r.Command)
	if err != nil {
		return RunResult{}, err
	}
	return followCommand(ctx, cl, cmd)
}

// followCommand returns the final outcome, or AwaitingConsent as soon as the command waits
// for an operator (the agent cannot approve; it calls command_result later). It follows cmd
// from the state held (one watch, the output read once), never reading the command again.
func followCommand(ctx context.Context, cl *wbclient.Client, cmd *wbv1.TerminalCommand) (RunResult, error) {
	ctx, cancel := context.WithTimeout(ctx, MaxRunWait)
	defer cancel()
	buf := &wbclient.CappedBuffer{Cap: MaxOutputBytes}
	final, err := cl.FollowCommand(ctx, cmd, wbclient.RunOptions{Output: buf, ReturnAtConsent: true})
	if final == nil {
		return RunResult{}, err
	}
	if wbv1.CommandPhaseFor(final.Status.Conditions) == wbv1.CommandAwaitingConsent {
		return RunResult{RunResult: wbclient.ResultOf(final, nil), Consent: cl.ConsentInfo(ctx, final)}, nil
	}
	res := RunResult{RunResult: wbclient.ResultOf(final, buf)}
	var exit *wbclient.ExitError
	if errors.As(err, &exit) {
		return res, nil // a non-zero exit is a result, not a refusal
	}
	return res, err
}

// FileResult is read_file's result.
type FileResult struct {
	Path      string `json:"path"`
	Digest    string `json:"digest,omitempty"`
	Size      int64  `json:"size"`
	Truncated bool   `json:"truncated"`
	Content   string `json:"content"`
}

func readFile(ctx context.Context, cl *wbclient.Client, r wbclient.FileRequest) (FileResult, error) {
	fc, err := cl.ReadFile(ctx, r)
	if err != nil {
		return FileResult{}, err
	}
	return FileResult{Path: fc.Path, Digest: fc.Digest, Size: fc.Size, Truncated: fc.Truncated, Content: string(fc.Data)}, nil
}

func snapshotFiles(ctx context.Context, cl *wbclient.Client, r wbclient.FileRequest) (wbclient.FileSnapshot, error) {
	s, err := cl.Snapshot(ctx, r)
	if err != nil {
		return wbclient.FileSnapshot{Entries: []wbclient.FileEntry{}}, err
	}
	if s.Entries == nil {
		s.Entries = []wbclient.FileEntry{}
	}
	return *s, nil
}

// PatchResult is propose_patch's result.
type PatchResult struct {
	Name     string `json:"name"`
	Digest   string `json:"digest"`
	Approval string `json:"approval"`
}

func proposePatch(ctx context.Context, cl *wbclient.Client, r wbclient.PatchRequest) (PatchResult, error) {
	p, err := cl.ProposePatch(ctx, r)
	if err != nil {
		return PatchResult{}, err
	}
	approval := string(p.Spec.Approval)
	if approval == "" {
		approval = "Pending"
	}
	return PatchResult{Name: p.Name, Digest: string(p.Spec.Digest), Approval: approval}, nil
}

// ConditionResult is wait's and probe's result.
type ConditionResult struct {
	Name        string   `json:"name"`
	Status      string   `json:"status"`
	Diagnostics []string `json:"diagnostics,omitempty"`
	SeqFrom     int64    `json:"seqFrom,omitempty"`
	SeqTo       int64    `json:"seqTo,omitempty"`
	Digest      string   `json:"digest,omitempty"`
}

func observed(o *wbv1.Observed, r *ConditionResult) {
	if o != nil {
		r.SeqFrom, r.SeqTo, r.Digest = o.SeqFrom, o.SeqTo, string(o.Digest)
	}
}

// conditionResult is what the wait and probe tools answer: the object's name, its
// summarized phase, its diagnostics and what it observed.
func conditionResult(name, phase string, diags []wbv1.WaitDiagnostic, o *wbv1.Observed) ConditionResult {
	res := ConditionResult{Name: name, Status: phase}
	for _, d := range diags {
		res.Diagnostics = append(res.Diagnostics, string(d))
	}
	observed(o, &res)
	return res
}

func waitTool(ctx context.Context, cl *wbclient.Client, r wbclient.ConditionRequest) (ConditionResult, error) {
	w, err := cl.Wait(ctx, r)
	if w == nil {
		return ConditionResult{}, err
	}
	res := conditionResult(w.Name, wbv1.WaitSummary(w).Phase, w.Status.Diagnostics, w.Status.Observed)
	var e *wbclient.Error
	if errors.As(err, &e) && (e.Class == wbclient.ClassTimedOut || e.Class == wbclient.ClassCancelled) {
		return res, nil // a deadline is an outcome of a wait, not a refusal
	}
	return res, err
}

func probeTool(ctx context.Context, cl *wbclient.Client, r wbclient.ConditionRequest) (ConditionResult, error) {
	p, err := cl.Probe(ctx, r)
	if p == nil {
		return ConditionResult{}, err
	}
	res := conditionResult(p.Name, wbv1.ProbeSummary(p).Phase, p.Status.Diagnostics, p.Status.Observed)
	var failed *wbclient.ProbeFailed
	if errors.As(err, &failed) {
		return res, nil
	}
	return res, err
}

// SessionRef names a terminal session.
type SessionRef struct {
	Session string `json:"session" jsonschema:"TerminalSession name"`
}

func screenTool(ctx context.Context, cl *wbclient.Client, r SessionRef) (wbclient.Screen, error) {
	s, err := cl.Screen(ctx, r.Session)
	if err != nil {
		return wbclient.Screen{Lines: []string{}}, err
	}
	if s.Lines == nil {
		s.Lines = []string{}
	}
	return *s, nil
}

// EventsRequest selects events of a session.
type EventsRequest struct {
	Session string `json:"session" jsonschema:"TerminalSession name"`
	Since   int64  `json:"since,omitempty" jsonschema:"only events after this sequence number"`
	Limit   int    `json:"limit,omitempty" jsonschema:"at most this many events (default and cap 1000)"`
}

// Events is events' result.
type Events struct {
	Events []wbclient.Event `json:"events"`
	Next   int64            `json:"next"`
}

func eventsTool(ctx context.Context, cl *wbclient.Client, r EventsRequest) (Events, error) {
	limit := r.Limit
	if limit <= 0 || limit > MaxEvents {
		limit = MaxEvents
	}
	out := Events{Events: []wbclient.Event{}, Next: r.Since}
	err := cl.Events(ctx, r.Session, wbclient.EventsOptions{Since: r.Since, Limit: limit}, func(ev wbclient.Event) error {
		if len(out.Events) >= limit {
			return nil
		}
		out.Events = append(out.Events, ev)
		out.Next = max(out.Next, ev.Seq, ev.To)
		return nil
	})
	return out, err
}

// ConsentRequests is list_consent_requests' result.
type ConsentRequests struct {
	Requests  []wbclient.ConsentInfo `json:"requests"`
	Approvers []string               `json:"approvers,omitempty"`
}

func listConsent(ctx context.Context, cl *wbclient.Client, _ NoInput) (ConsentRequests, error) {
	items, err := cl.ListConsentRequests(ctx, true)
	if err != nil {
		return ConsentRequests{Requests: []wbclient.ConsentInfo{}}, err
	}
	return ConsentRequests{Requests: cl.ConsentSummaries(items), Approvers: cl.Approvers(ctx)}, nil
}

// Package waits is the node agent's event-driven wait and probe engine.
//
// A wait registers one declarative condition on one Source (a terminal
// session, a file, a command, an environment, an artifact, an operation) and
// ends exactly once: Satisfied when the condition holds, TimedOut when the
// deadline passes (the engine returns; it never kills anything), Cancelled
// when its context ends or Cancel is called, or Failed when the source errs or
// reports that the condition can no longer hold. A probe evaluates the same
// condition vocabulary once, now, within a short timeout.
//
// Nothing polls. Each pending wait parks on the source's change channel, on
// its deadline timer and, when a time window matters (quiet windows,
// diagnostics thresholds), on one re-check timer; an idle pending wait costs a
// parked goroutine and no CPU. Silence is not a hang: the session source
// reports quiescent, waiting-for-input, no-progress and maybe-hung as
// diagnostics only.
//
// Every bound is explicit and refuses with a stable code: too many pending
// waits (queue-full), a deadline beyond the maximum (deadline-above-max), a
// missing source, unknown kind or malformed parameter (wait-scope-invalid).
// No Kubernetes imports.
package waits

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Condition kinds (the closed vocabulary of Wait/Probe condition.kind).
const (
	KindOutputSince   = "terminal.output.since"
	KindOutputMatches = "terminal.output.matches"
	KindQuiescent     = "terminal.quiescent"
	KindCommandDone   = "terminal.command.done"
	KindProcessAlive  = "terminal.process.alive"
	KindNoProgress    = "terminal.no-progress"
	KindFileExists    = "file.exists"
	KindDigestChanged = "file.digest.changed"
	KindArtifact      = "artifact.present"
	KindEnvironment   = "environment.ready"
	KindOperationDone = "operation.done"
)

var kinds = map[string]bool{
	KindOutputSince: true, KindOutputMatches: true, KindQuiescent: true, KindCommandDone: true,
	KindProcessAlive: true, KindNoProgress: true, KindFileExists: true, KindDigestChanged: true,
	KindArtifact: true, KindEnvironment: true, KindOperationDone: true,
}

// Kinds returns the condition vocabulary.
func Kinds() []string {
	return []string{KindOutputSince, KindOutputMatches, KindQuiescent, KindCommandDone, KindProcessAlive,
		KindNoProgress, KindFileExists, KindDigestChanged, KindArtifact, KindEnvironment, KindOperationDone}
}

// Defaults and ceilings.
const (
	DefaultPendingWaits = 1000
	DefaultMaxDeadline  = 3600 * time.Second
	// DefaultConcurrentProbes bounds probes evaluating at once (queue-full).
	DefaultConcurrentProbes = 64
	// DefaultProbeTimeout applies when Probe's timeout is 0; MaxProbeTimeout
	// caps it (timeout-above-max).
	DefaultProbeTimeout = 5 * time.Second
	MaxProbeTimeout     = 30 * time.Second
	// MaxQuiet bounds Request.Quiet (wait-scope-invalid above it).
	MaxQuiet = 3600 * time.Second
	// MaxPatternBytes bounds the source text of Request.Pattern (RE2).
	MaxPatternBytes = 256
	// MaxIDBytes bounds Request.ID.
	MaxIDBytes = 253
	// MaxDetailBytes bounds Observation.Detail; MaxDiagnostics bounds the
	// diagnostics list.
	MaxDetailBytes = 256
	MaxDiagnostics = 5
	// maxSpin bounds consecutive evaluations woken by a change channel that
	// was already ready after the evaluation while the observation did not
	// move (a misbehaving Source that returns a closed channel forever); the
	// wait then fails instead of burning CPU.
	maxSpin = 10_000
)

// Status is the outcome of a wait.
type Status string

// Wait statuses (Expired is the node agent's: a wait its store recorded but
// no live engine holds).
const (
	StatusPending   Status = "Pending"
	StatusSatisfied Status = "Satisfied"
	StatusTimedOut  Status = "TimedOut"
	StatusCancelled Status = "Cancelled"
	StatusFailed    Status = "Failed"
)

// Diagnostic is an observation, never a verdict.
type Diagnostic string

// Diagnostics (closed vocabulary of Wait/Probe status.diagnostics).
const (
	DiagQuiescent       Diagnostic = "quiescent"
	DiagWaitingForInput Diagnostic = "waiting-for-input"
	DiagNoProgress      Diagnostic = "no-progress"
	DiagMaybeHung       Diagnostic = "maybe-hung"
	DiagProbeFailed     Diagnostic = "probe-failed"
)

// Caps bound the engine. Zero fields select the defaults.
type Caps struct {
	PendingWaits     int           // default 1000 (queue-full)
	MaxDeadline      time.Duration // default 3600s (deadline-above-max)
	ConcurrentProbes int           // default 64 (queue-full)
}

func (c Caps) withDefaults() Caps {
	if c.PendingWaits <= 0 {
		c.PendingWaits = DefaultPendingWaits
	}
	if c.MaxDeadline <= 0 {
		c.MaxDeadline = DefaultMaxDeadline
	}
	if c.ConcurrentProbes <= 0 {
		c.ConcurrentProbes = DefaultConcurrentProbes
	}
	return c
}

// Request is one condition on one source.
type Request struct {
	// ID identifies the wait (the Wait object's UID); Register is idempotent
	// by ID while the wait is pending.
	ID   string
	Kind string
	// Deadline bounds the wait (required; at most Caps.MaxDeadline ahead).
	// Probes ignore it.
	Deadline time.Time
	// Pattern (RE2, at most MaxPatternBytes of source) for
	// terminal.output.matches.
	Pattern *regexp.Regexp
	// SinceSeq: only output after this event seq counts (output.since,
	// output.matches).
	SinceSeq uint64
	// Quiet is the silence window of terminal.quiescent and
	// terminal.no-progress (required there, at most MaxQuiet); other
	// terminal kinds use it, when set, for their diagnostics.
	Quiet time.Duration
	// PrevDigest for file.digest.changed: "sha256:<hex>", or "" meaning the
	// file was absent.
	PrevDigest string
	// Source observes the scoped resource.
	Source Source

	term *termScan // per-wait scan state of the session source
}

// Observation is what a source saw at one evaluation: sequence numbers,
// digests and short text only, never terminal bytes or file contents.
type Observation struct {
	Satisfied bool
	// Final: the condition can no longer become satisfied (the session
	// ended without the output, the command finished otherwise...). The
	// wait ends Failed.
	Final bool
	// SeqFrom..SeqTo is the event range the observation covers (terminal).
	SeqFrom, SeqTo uint64
	// Digest is "sha256:<hex>" of the observed thing (file content, screen).
	Digest string
	// Detail is a short human note (bounded by MaxDetailBytes).
	Detail      string
	Diagnostics []Diagnostic
	// RecheckAfter asks the engine to evaluate again after this long even
	// if nothing changes (quiet windows, diagnostic thresholds); 0 = only
	// on change.
	RecheckAfter time.Duration
	ObservedAt   time.Time
}

func (o *Observation) bound() {
	if len(o.Detail) > MaxDetailBytes {
		o.Detail = o.Detail[:MaxDetailBytes]
	}
	if len(o.Diagnostics) > MaxDiagnostics {
		o.Diagnostics = o.Diagnostics[:MaxDiagnostics]
	}
	if o.ObservedAt.IsZero() {
		o.ObservedAt = time.Now()
	}
}

// Result is the single outcome of a wait.
type Result struct {
	ID          string
	Kind        string
	Status      Status
	Reason      string // why it ended (bounded text)
	Err         error  // Failed: the source's error (refusal codes reachable via CodeOf)
	Started     time.Time
	Ended       time.Time
	Duration    time.Duration
	Observation Observation // the last observation
	Diagnostics []Diagnostic
	Evaluations int
}

// Handle is a registered wait.
type Handle struct {
	id, kind string
	started  time.Time
	cancel   chan struct{}
	cancelMu sync.Once
	done     chan struct{}

	mu     sync.Mutex
	last   Observation
	evals  int
	result Result
}

// ID returns the wait's ID.
func (h *Handle) ID() string { return h.id }

// Done is closed once the wait ended.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Cancel ends a pending wait as Cancelled (no effect once it ended).
func (h *Handle) Cancel() { h.cancelMu.Do(func() { close(h.cancel) }) }

// Result returns the outcome and true once the wait ended; before that the
// zero Result and false.
func (h *Handle) Result() (Result, bool) {
	select {
	case <-h.done:
		return h.result, true
	default:
		return Result{}, false
	}
}

// Wait blocks until the wait ended or ctx is done (ctx ending does not cancel
// the wait).
func (h *Handle) Wait(ctx context.Context) (Result, error) {
	select {
	case <-h.done:
		return h.result, nil
	case <-ctx.Done():
		return Result{}, fmt.Errorf("wait %q: %w", h.id, ctx.Err())
	}
}

// Last returns the latest observation of a pending (or ended) wait and the
// number of evaluations so far (for status updates while pending).
func (h *Handle) Last() (Observation, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last, h.evals
}

// Stats is a snapshot of the engine's counters.
type Stats struct {
	Pending  int
	Probing  int
	Finished map[Status]uint64
}

// Engine holds the pending waits of one node agent.
type Engine struct {
	caps Caps

	mu       sync.Mutex
	pending  map[string]*Handle
	probing  int
	closed   bool
	finished map[Status]uint64
	stop     chan struct{}
}

// NewEngine returns an engine enforcing caps (zero fields: defaults).
func NewEngine(c Caps) *Engine {
	return &Engine{
		caps:     c.withDefaults(),
		pending:  map[string]*Handle{},
		finished: map[Status]uint64{},
		stop:     make(chan struct{}),
	}
}

// Caps returns the effective caps.
func (e *Engine) Caps() Caps { return e.caps }

// Pending returns the number of pending waits.
func (e *Engine) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.pending)
}

// Get returns the pending wait with this ID.
func (e *Engine) Get(id string) (*Handle, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h, ok := e.pending[id]
	return h, ok
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := Stats{Pending: len(e.pending), Probing: e.probing, Finished: map[Status]uint64{}}
	for k, v := range e.finished {
		st.Finished[k] = v
	}
	return st
}

// Close cancels every pending wait (Cancelled, "engine closed") and refuses
// further registrations and probes with interrupted.
func (e *Engine) Close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.stop)
	}
	e.mu.Unlock()
}

// validate checks the condition parameters common to waits and probes.
func validate(req *Request) error {
	switch {
	case req.ID == "" || len(req.ID) > MaxIDBytes:
		return actuation.Refusef(actuation.CodeWaitScopeInvalid, "wait ID must be 1..%d bytes", MaxIDBytes)
	case !kinds[req.Kind]:
		return actuation.Refusef(actuation.CodeWaitScopeInvalid, "wait %q: unknown condition kind %q", req.ID, req.Kind)
	case req.Source == nil:
		return actuation.Refusef(actuation.CodeWaitScopeInvalid, "wait %q: no source for %s", req.ID, req.Kind)
	}
	if ks, ok := req.Source.(KindSupporter); ok && !ks.Supports(req.Kind) {
		return actuation.Refusef(actuation.CodeWaitScopeInvalid, "wait %q: the scoped source cannot evaluate %s", req.ID, req.Kind)
	}
	if req.Quiet < 0 || req.Quiet > MaxQuiet {
		return actuation.Refusef(actuation.CodeWaitScopeInvalid, "wait %q: quiet window %s outside 0..%s", req.ID, req.Quiet, MaxQuiet)
	}
	switch req.Kind {
	case KindOutputMatches:
		if req.Pattern == nil {
			return actuation.Refusef(actuation.CodeWaitScopeInvalid, "wait %q: %s needs a pattern", req.ID, req.Kind)
		}
		if n := len(req.Pattern.String()); n > MaxPatternBytes {
			return actuation.Refusef(actuation.CodeWaitScopeInvalid, "wait %q: pattern is %d bytes, at most %d", req.ID, n, MaxPatternBytes)
		}
	case KindQuiescent, KindNoProgress:
		if req.Quiet <= 0 {
			return actuation.Refusef(actuation.CodeWaitScopeInvalid, "wait %q: %s needs a quiet window > 0", req.ID, req.Kind)
		}
	case KindDigestChanged:
		if req.PrevDigest != "" {
			if _, err := fsaccess.ParseDigest(req.PrevDigest); err != nil {
				return actuation.Refusef(actuation.CodeWaitScopeInvalid, "wait %q: previous digest: %v", req.ID, err)
			}
		}
	}
	return nil
}

// Register validates req and starts waiting. ctx bounds the wait's life (its
// end cancels the wait): pass the agent's long-lived context, not a
// request's. A pending wait with the same ID and kind is returned as is;
// the same ID with another kind refuses wait-scope-invalid.
func (e *Engine) Register(ctx context.Context, req Request) (*Handle, error) {
	h, started, err := e.register(ctx, req)
	if !started {
		release(req.Source)
	}
	return h, err
}

func (e *Engine) register(ctx context.Context, req Request) (*Handle, bool, error) {
	if err := validate(&req); err != nil {
		return nil, false, err
	}
	now := time.Now()
	switch {
	case req.Deadline.IsZero():
		return nil, false, actuation.Refusef(actuation.CodeDeadlineAboveMax, "wait %q: a deadline is required (at most %s)", req.ID, e.caps.MaxDeadline)
	case req.Deadline.Sub(now) > e.caps.MaxDeadline:
		return nil, false, actuation.Refusef(actuation.CodeDeadlineAboveMax, "wait %q: deadline %s ahead exceeds %s", req.ID, req.Deadline.Sub(now).Round(time.Millisecond), e.caps.MaxDeadline)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, false, actuation.Refusef(actuation.CodeInterrupted, "wait engine is closed")
	}
	if h, ok := e.pending[req.ID]; ok {
		if h.kind != req.Kind {
			return nil, false, actuation.Refusef(actuation.CodeWaitScopeInvalid, "wait %q is pending with kind %s, not %s", req.ID, h.kind, req.Kind)
		}
		return h, false, nil
	}
	if len(e.pending) >= e.caps.PendingWaits {
		return nil, false, actuation.Refusef(actuation.CodeQueueFull, "%d pending waits (cap %d)", len(e.pending), e.caps.PendingWaits)
	}
	h := &Handle{id: req.ID, kind: req.Kind, started: now, cancel: make(chan struct{}), done: make(chan struct{})}
	e.pending[req.ID] = h
	go e.run(ctx, h, req)
	return h, true, nil
}

// observe calls the source, turning a panic into an error.
func observe(src Source, req *Request) (obs Observation, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("source panicked: %v", p)
		}
	}()
	obs, err = src.Observe(req)
	obs.bound()
	return obs, err
}

func ready(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func sameObservation(a, b Observation) bool {
	return a.SeqFrom == b.SeqFrom && a.SeqTo == b.SeqTo && a.Digest == b.Digest && a.Detail == b.Detail
}

// run is the wait's goroutine: evaluate, park, repeat; end exactly once.
func (e *Engine) run(ctx context.Context, h *Handle, req Request) {
	deadline := time.NewTimer(time.Until(req.Deadline))
	defer deadline.Stop()
	recheck := time.NewTimer(time.Hour)
	recheck.Stop()
	defer recheck.Stop()
	spins := 0
	var prev *Observation

	finish := func(st Status, reason string, err error) {
		h.mu.Lock()
		now := time.Now()
		h.result = Result{
			ID: h.id, Kind: h.kind, Status: st, Reason: reason, Err: err,
			Started: h.started, Ended: now, Duration: now.Sub(h.started),
			Observation: h.last, Diagnostics: h.last.Diagnostics, Evaluations: h.evals,
		}
		h.mu.Unlock()
		e.mu.Lock()
		delete(e.pending, h.id)
		e.finished[st]++
		e.mu.Unlock()
		release(req.Source)
		close(h.done)
	}
	eval := func() (Observation, error) {
		obs, err := observe(req.Source, &req)
		h.mu.Lock()
		h.evals++
		if err == nil {
			h.last = obs
		}
		h.mu.Unlock()
		return obs, err
	}

	for {
		changed := req.Source.Changed() // taken before observing: no lost wake-up
		obs, err := eval()
		switch {
		case err != nil:
			finish(StatusFailed, "source error: "+err.Error(), err)
			return
		case obs.Satisfied:
			finish(StatusSatisfied, "condition satisfied", nil)
			return
		case obs.Final:
			finish(StatusFailed, "condition can no longer be satisfied: "+obs.Detail, nil)
			return
		}
		if ready(changed) {
			// Changed while observing: evaluate again at once. A source
			// whose channel stays ready while its observation never moves
			// is misbehaving; stop it instead of spinning.
			if prev != nil && sameObservation(*prev, obs) {
				if spins++; spins > maxSpin {
					finish(StatusFailed, "source reports a change on every evaluation but its observation never moves", nil)
					return
				}
			} else {
				spins = 0
			}
			prev = &obs
			continue
		}
		spins, prev = 0, nil
		var recheckC <-chan time.Time
		if obs.RecheckAfter > 0 {
			recheck.Reset(obs.RecheckAfter)
			recheckC = recheck.C
		}
		select {
		case <-changed:
		case <-recheckC:
		case <-deadline.C:
			// One last look at the deadline: a condition that holds now
			// is reported Satisfied, else TimedOut. Nothing is killed.
			obs, err := eval()
			switch {
			case err != nil:
				finish(StatusFailed, "source error: "+err.Error(), err)
			case obs.Satisfied:
				finish(StatusSatisfied, "condition satisfied at the deadline", nil)
			default:
				finish(StatusTimedOut, "deadline passed; nothing was killed", nil)
			}
			return
		case <-ctx.Done():
			finish(StatusCancelled, "context ended: "+ctx.Err().Error(), nil)
			return
		case <-h.cancel:
			finish(StatusCancelled, "cancel requested", nil)
			return
		case <-e.stop:
			finish(StatusCancelled, "engine closed", nil)
			return
		}
		recheck.Stop()
	}
}

// ProbeOutcome is the result of one probe.
type ProbeOutcome string

// Probe outcomes.
const (
	ProbePass  ProbeOutcome = "Pass"
	ProbeFail  ProbeOutcome = "Fail"
	ProbeError ProbeOutcome = "Error"
)

// ProbeResult is the outcome of one active check.
type ProbeResult struct {
	ID          string
	Kind        string
	Result      ProbeOutcome
	ObservedAt  time.Time
	Duration    time.Duration
	Observation Observation
	Diagnostics []Diagnostic
	Err         error // Error: why the check could not be made
}

// ErrProbeTimeout is the Err of a probe whose source did not answer in time.
var ErrProbeTimeout = errors.New("probe timed out")

// Probe evaluates req once, now, within timeout (0: DefaultProbeTimeout;
// above MaxProbeTimeout refuses timeout-above-max). req.Deadline is ignored.
// The outcome is Pass (condition holds), Fail (it does not) or Error (the
// source failed or did not answer in time; diagnostics carry probe-failed).
// A refusal (bad request, too many concurrent probes) is returned as error.
func (e *Engine) Probe(ctx context.Context, req Request, timeout time.Duration) (ProbeResult, error) {
	if err := validate(&req); err != nil {
		release(req.Source)
		return ProbeResult{}, err
	}
	var refused error
	switch {
	case timeout < 0:
		refused = actuation.Refusef(actuation.CodeTimeoutAboveMax, "probe %q: negative timeout", req.ID)
	case timeout == 0:
		timeout = DefaultProbeTimeout
	case timeout > MaxProbeTimeout:
		refused = actuation.Refusef(actuation.CodeTimeoutAboveMax, "probe %q: timeout %s exceeds %s", req.ID, timeout, MaxProbeTimeout)
	}
	e.mu.Lock()
	switch {
	case refused != nil:
	case e.closed:
		refused = actuation.Refusef(actuation.CodeInterrupted, "wait engine is closed")
	case e.probing >= e.caps.ConcurrentProbes:
		refused = actuation.Refusef(actuation.CodeQueueFull, "%d probes evaluating (cap %d)", e.probing, e.caps.ConcurrentProbes)
	}
	if refused != nil {
		e.mu.Unlock()
		release(req.Source)
		return ProbeResult{}, refused
	}
	e.probing++ // released when the evaluation returns, even after a timeout
	e.mu.Unlock()

	start := time.Now()
	type answer struct {
		obs Observation
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		obs, err := observe(req.Source, &req)
		release(req.Source)
		e.mu.Lock()
		e.probing--
		e.mu.Unlock()
		ch <- answer{obs, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	res := ProbeResult{ID: req.ID, Kind: req.Kind}
	fail := func(err error) (ProbeResult, error) {
		res.Result, res.Err = ProbeError, err
		res.ObservedAt = time.Now()
		res.Duration = res.ObservedAt.Sub(start)
		res.Diagnostics = append(res.Diagnostics, DiagProbeFailed)
		return res, nil
	}
	select {
	case a := <-ch:
		if a.err != nil {
			return fail(a.err)
		}
		res.Observation, res.Diagnostics = a.obs, append([]Diagnostic(nil), a.obs.Diagnostics...)
		res.ObservedAt, res.Duration = a.obs.ObservedAt, time.Since(start)
		res.Result = ProbeFail
		if a.obs.Satisfied {
			res.Result = ProbePass
		}
		return res, nil
	case <-timer.C:
		return fail(fmt.Errorf("probe %q after %s: %w", req.ID, timeout, ErrProbeTimeout))
	case <-ctx.Done():
		return fail(fmt.Errorf("probe %q: %w", req.ID, ctx.Err()))
	}
}

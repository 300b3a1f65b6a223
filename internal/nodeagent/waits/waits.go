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
	"fmt"
	"regexp"
	"sync"
	"time"
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

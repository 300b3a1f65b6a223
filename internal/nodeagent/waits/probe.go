package waits

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sensorium.dev/workbench/internal/actuation"
)

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

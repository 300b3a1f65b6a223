package waits

import (
	"context"
	"fmt"
	"sync"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

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

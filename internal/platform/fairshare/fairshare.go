// Package fairshare divides a node-wide cap (e.g. the data plane's long-lived stream
// slots) between identity classes, so that one identity cannot take every slot: a reserve
// of the cap only operators may take, and a per-identity share for every other identity
// (agents, observers holding a view grant). Operators are bounded by the cap alone. A
// refusal names the cap and the share it hit: queue-full when the whole cap is taken,
// share-cap-reached when the caller's class or identity holds its share. The package has
// no Kubernetes imports; callers classify their principals.
package fairshare

import (
	"fmt"
	"sync"

	"sensorium.dev/workbench/internal/actuation"
)

// Class is an identity class.
type Class string

// The identity classes.
const (
	Operator Class = "operator" // holds the node-operator binding: the reserve is theirs
	Agent    Class = "agent"    // a model-driven tool
	Observer Class = "observer" // a viewer or a view grantee
)

// Shares divide Total slots. Zero fields select the defaults (Defaults).
type Shares struct {
	// Total is the node-wide cap.
	Total int
	// OperatorReserve slots are only ever taken by operators: the other classes together
	// hold at most Total - OperatorReserve.
	OperatorReserve int
	// PerIdentity is the most slots one non-operator identity holds at once.
	PerIdentity int
}

// Defaults fills the unset shares of s: a quarter of the cap reserved for operators, and
// half of the rest per identity (at least one slot each).
func (s Shares) Defaults() Shares {
	if s.OperatorReserve == 0 {
		s.OperatorReserve = s.Total / 4
	}
	if s.PerIdentity == 0 {
		s.PerIdentity = max(1, (s.Total-s.OperatorReserve)/2)
	}
	return s
}

// Validate checks the shares (after Defaults).
func (s Shares) Validate() error {
	switch {
	case s.Total < 1:
		return fmt.Errorf("fairshare: total %d < 1", s.Total)
	case s.OperatorReserve < 0 || s.OperatorReserve >= s.Total:
		return fmt.Errorf("fairshare: operator reserve %d must be 0..%d (below the total)", s.OperatorReserve, s.Total-1)
	case s.PerIdentity < 1 || s.PerIdentity > s.Total-s.OperatorReserve:
		return fmt.Errorf("fairshare: per-identity share %d must be 1..%d (the total less the operator reserve)", s.PerIdentity, s.Total-s.OperatorReserve)
	}
	return nil
}

// Pool counts the slots taken by class and identity. Safe for concurrent use.
type Pool struct {
	name   string
	s      Shares
	mu     sync.Mutex
	used   int            // every class
	others int            // every class but Operator
	per    map[string]int // non-operator identity -> slots
}

// New returns a pool named name (in refusals, e.g. "stream") with shares s (defaults
// applied).
func New(name string, s Shares) (*Pool, error) {
	s = s.Defaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &Pool{name: name, s: s, per: map[string]int{}}, nil
}

// Shares returns the pool's shares.
func (p *Pool) Shares() Shares { return p.s }

// Acquire takes one slot for identity of class, or refuses. release gives it back (once).
func (p *Pool) Acquire(class Class, identity string) (release func(), err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used >= p.s.Total {
		return nil, &actuation.Refusal{Code: actuation.CodeQueueFull, Message: fmt.Sprintf("all %d %s slots are in use", p.s.Total, p.name)}
	}
	op := class == Operator
	if !op {
		if open := p.s.Total - p.s.OperatorReserve; p.others >= open {
			return nil, &actuation.Refusal{Code: actuation.CodeShareCapReached, Message: fmt.Sprintf(
				"the %d %s slots open to agents and observers are in use (%d of %d are reserved for operators); %s %q is refused",
				open, p.name, p.s.OperatorReserve, p.s.Total, class, identity)}
		}
		if p.per[identity] >= p.s.PerIdentity {
			return nil, &actuation.Refusal{Code: actuation.CodeShareCapReached, Message: fmt.Sprintf(
				"%s %q holds its share of %d of the %d %s slots", class, identity, p.s.PerIdentity, p.s.Total, p.name)}
		}
		p.others++
		p.per[identity]++
	}
	p.used++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.used--
			if !op {
				p.others--
				if p.per[identity]--; p.per[identity] == 0 {
					delete(p.per, identity)
				}
			}
		})
	}, nil
}

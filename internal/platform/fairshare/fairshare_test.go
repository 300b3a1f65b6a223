package fairshare

import (
	"errors"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

func code(err error) actuation.Code {
	var r *actuation.Refusal
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

// TestSharesHoldForEveryMix: whatever mix of agents and observers asks, they never hold
// the operator reserve, no identity holds more than its share, operators fill the cap,
// and releases (once each) give the slots back.
func TestSharesHoldForEveryMix(t *testing.T) {
	p, err := New("stream", Shares{Total: 8, OperatorReserve: 2, PerIdentity: 3})
	if err != nil {
		t.Fatal(err)
	}
	var releases []func()
	take := func(c Class, id string) error {
		rel, err := p.Acquire(c, id)
		if err == nil {
			releases = append(releases, rel)
		}
		return err
	}
	for i := 0; i < 3; i++ {
		if err := take(Agent, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := take(Agent, "a"); code(err) != actuation.CodeShareCapReached {
		t.Fatalf("agent a past its share: %v", err)
	}
	for i := 0; i < 3; i++ {
		if err := take(Observer, "v"); err != nil {
			t.Fatal(err)
		}
	}
	if err := take(Agent, "b"); code(err) != actuation.CodeShareCapReached {
		t.Fatalf("agent b into the operator reserve: %v", err)
	}
	if err := take(Operator, "o"); err != nil {
		t.Fatal(err)
	}
	if err := take(Operator, "o"); err != nil {
		t.Fatal(err)
	}
	if err := take(Operator, "o"); code(err) != actuation.CodeQueueFull {
		t.Fatalf("operator past the cap: %v", err)
	}
	releases[0]()
	releases[0]() // a second release gives nothing back
	if err := take(Agent, "b"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if err := take(Agent, "c"); code(err) == "" {
		t.Fatal("a double release freed two slots")
	}
}

func TestSharesValidate(t *testing.T) {
	for _, s := range []Shares{{Total: 0}, {Total: 4, OperatorReserve: 4}, {Total: 4, OperatorReserve: 1, PerIdentity: 4}, {Total: 4, OperatorReserve: -1}} {
		if _, err := New("x", s); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if s := (Shares{Total: 64}).Defaults(); s.OperatorReserve != 16 || s.PerIdentity != 24 {
		t.Errorf("defaults of 64: %+v", s)
	}
	if s := (Shares{Total: 1}).Defaults(); s.Validate() != nil || s.OperatorReserve != 0 || s.PerIdentity != 1 {
		t.Errorf("defaults of 1: %+v", s)
	}
}

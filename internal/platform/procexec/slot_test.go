package procexec

import "testing"

// A reserved slot counts against the cap until a Start takes it or it is released; a
// slot is given back once only, and never by the wrong runner's Start.
func TestReserveSlot(t *testing.T) {
	r, other := NewRunner(Limits{MaxConcurrent: 1}), NewRunner(Limits{MaxConcurrent: 1})
	s, ok := r.Reserve()
	if !ok || r.Running() != 1 {
		t.Fatalf("Reserve on a free runner = %v, running %d", ok, r.Running())
	}
	if _, ok := r.Reserve(); ok {
		t.Fatal("a second Reserve on a runner capped at 1 succeeded")
	}
	if s.take(other) {
		t.Fatal("another runner's Start took the slot")
	}
	if !s.Release() || r.Running() != 0 {
		t.Fatalf("Release of an unused slot: running %d", r.Running())
	}
	if s.Release() || s.take(r) {
		t.Fatal("a released slot was released or taken again")
	}
	s2, _ := r.Reserve()
	if !s2.take(r) || s2.Release() || r.Running() != 1 {
		t.Fatalf("a slot a Start took was released by its reserver (running %d)", r.Running())
	}
	var none *Slot
	if none.Release() || none.take(r) {
		t.Fatal("a nil slot did something")
	}
}

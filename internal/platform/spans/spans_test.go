package spans

import (
	"fmt"
	"testing"
)

func TestMarkWithoutRecorderRecordsNothing(t *testing.T) {
	Install(nil)
	Mark("op", "a")
	if Marker("op") != nil {
		t.Fatal("Marker without a recorder must be nil")
	}
	r := NewRecorder()
	Install(r)
	defer Install(nil)
	if got := r.Take("op"); len(got) != 0 {
		t.Fatalf("a mark made before Install was kept: %v", got)
	}
}

func TestFirstMarkOfAStepCountsAndTakeOrdersAndReleases(t *testing.T) {
	r := NewRecorder()
	Install(r)
	defer Install(nil)
	Mark("op", "a")
	m := Marker("op")
	m("b")
	first := r.ops["op"][0].At
	Mark("op", "a") // a retried pass: ignored
	pts := r.Take("op")
	if len(pts) != 2 || pts[0].Step != "a" || pts[1].Step != "b" || !pts[0].At.Equal(first) || pts[1].At.Before(pts[0].At) {
		t.Fatalf("points: %+v", pts)
	}
	if len(r.Take("op")) != 0 {
		t.Fatal("Take did not release the operation")
	}
}

func TestCapsRefuseAndCount(t *testing.T) {
	r := NewRecorder()
	Install(r)
	defer Install(nil)
	for i := 0; i < MaxOps+3; i++ {
		Mark(fmt.Sprint(i), "s")
	}
	for i := 0; i < MaxSteps+2; i++ {
		Mark("0", fmt.Sprint("step", i))
	}
	if len(r.ops) != MaxOps {
		t.Fatalf("ops held: %d, cap %d", len(r.ops), MaxOps)
	}
	if n := len(r.ops["0"]); n != MaxSteps {
		t.Fatalf("steps held: %d, cap %d", n, MaxSteps)
	}
	if r.Dropped() != 3+3 {
		t.Fatalf("dropped %d, want 6", r.Dropped())
	}
}

package backends

import "testing"

func TestDrainMarks(t *testing.T) {
	var d DrainMarks
	if d.Draining("a") {
		t.Fatal("the zero value marks a")
	}
	d.Mark("a")
	d.Mark("b")
	if !d.Draining("a") || !d.Draining("b") {
		t.Fatal("marks a and b not kept")
	}
	d.Forget("a")
	if d.Draining("a") {
		t.Fatal("a still marked after Forget")
	}
	d.Retain(map[string]Spec{"c": {}})
	if d.Draining("b") {
		t.Fatal("b, unknown to the store, still marked after Retain")
	}
	d.Mark("c")
	d.Retain(map[string]Spec{"c": {}})
	if !d.Draining("c") {
		t.Fatal("c, known to the store, dropped by Retain")
	}
}

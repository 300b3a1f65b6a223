package sessions

import (
	"slices"
	"testing"
)

// TestRegistryCountsAndShares: the registry counts only open sessions (in all and per
// environment), and gives a session's share slot back when it is marked closed or removed
// while open (a second release, on removing a closed session, is the pool's to ignore:
// fairshare releases once).
func TestRegistryCountsAndShares(t *testing.T) {
	r := NewRegistry()
	released := map[string]int{}
	put := func(uid, env string) {
		r.Put(uid, &Live{EnvUID: env, release: func() { released[uid]++ }})
	}
	put("a", "e1")
	put("b", "e1")
	put("c", "e2")
	if open, per := r.OpenCounts(); open != 3 || per["e1"] != 2 || per["e2"] != 1 {
		t.Fatalf("OpenCounts = %d %v, want 3 {e1:2 e2:1}", open, per)
	}
	if got := r.MarkClosed("a"); got == nil {
		t.Fatal("MarkClosed of a held session returned nil")
	}
	if released["a"] != 1 {
		t.Fatalf("MarkClosed released a's share %d times, want 1", released["a"])
	}
	if s, closed := r.Get("a"); s == nil || !closed {
		t.Fatalf("Get(a) after MarkClosed = %v, %v; want held and closed", s, closed)
	}
	if r.Open("a") != nil {
		t.Fatal("Open returned a closed session")
	}
	if open, per := r.OpenCounts(); open != 2 || per["e1"] != 1 {
		t.Fatalf("OpenCounts after closing a = %d %v, want 2 {e1:1}", open, per)
	}
	if got := r.OpenIn("e1"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("OpenIn(e1) = %v, want [b]", got)
	}
	r.Remove("c") // removed while open
	if released["c"] != 1 || released["b"] != 0 {
		t.Fatalf("share releases = %v, want c:1 b:0", released)
	}
	r.Remove("a")
	if r.MarkClosed("missing") != nil {
		t.Fatal("MarkClosed of an unknown session returned a session")
	}
	r.MarkClosed("b")
	r.DropClosed(map[string]bool{}) // b's object is gone: forget it
	if r.Len() != 0 || len(r.UIDs()) != 0 {
		t.Fatalf("after DropClosed: Len %d, UIDs %v; want empty", r.Len(), r.UIDs())
	}
}

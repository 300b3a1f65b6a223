package commands

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

func memoCommand(uid string, gen int64, conds ...metav1.Condition) *wbv1.TerminalCommand {
	c := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Generation: gen}}
	c.Status.Conditions = conds
	return c
}

var (
	startedCond   = metav1.Condition{Type: wbv1.ConditionStarted, Status: metav1.ConditionTrue, Reason: "Started"}
	completedCond = metav1.Condition{Type: wbv1.ConditionCompleted, Status: metav1.ConditionTrue, Reason: string(wbv1.CommandSucceeded)}
)

// A pass whose cached copy is older than the node's own last write is told so until the
// cache shows that write; a new generation (a cancel), an expired entry or a cache that
// caught up is never held back. The clock is passed in: no timed assertion.
func TestWrittenMemoHoldsOnlyStaleCopies(t *testing.T) {
	w := newWrittenMemo()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	w.note(memoCommand("a", 1), []metav1.Condition{startedCond, completedCond}, now)
	if !w.behind(memoCommand("a", 1), now) {
		t.Fatal("a cached copy with no status after the node wrote the outcome: want behind")
	}
	if !w.behind(memoCommand("a", 1, startedCond), now) {
		t.Fatal("a cached Running copy after the node wrote the outcome: want behind")
	}
	if w.behind(memoCommand("a", 1, startedCond, completedCond), now) {
		t.Fatal("a cached copy showing the outcome: want not behind")
	}
	if w.behind(memoCommand("a", 1), now) {
		t.Fatal("the entry is dropped once the cache showed the write")
	}
	w.note(memoCommand("b", 1), []metav1.Condition{startedCond}, now)
	if w.behind(memoCommand("b", 2), now) {
		t.Fatal("a new generation (a cancel) is never held back")
	}
	w.note(memoCommand("c", 1), []metav1.Condition{startedCond}, now)
	if w.behind(memoCommand("c", 1), now.Add(writtenTTL+time.Second)) {
		t.Fatal("an expired entry is never held back")
	}
	w.note(memoCommand("d", 1), nil, now)
	if w.behind(memoCommand("d", 1), now) {
		t.Fatal("a write that shows no start is not remembered")
	}
}

// The memo holds at most writtenCap entries: past it a write is not remembered (expired
// entries are swept first).
func TestWrittenMemoBounded(t *testing.T) {
	w := newWrittenMemo()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for i := 0; i < writtenCap+10; i++ {
		w.note(memoCommand(fmt.Sprint(i), 1), []metav1.Condition{startedCond}, now)
	}
	if len(w.m) != writtenCap {
		t.Fatalf("memo holds %d entries, want the cap %d", len(w.m), writtenCap)
	}
	w.note(memoCommand("late", 1), []metav1.Condition{startedCond}, now.Add(writtenTTL+time.Second))
	if len(w.m) != 1 || !w.behind(memoCommand("late", 1), now.Add(writtenTTL+time.Second)) {
		t.Fatalf("expired entries not swept for a new one: %d entries", len(w.m))
	}
}

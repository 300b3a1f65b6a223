package commands

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// writtenTTL bounds how long the node remembers a status write it made (the watch event of
// that write reaches its cache well within it); writtenCap bounds how many it remembers.
const (
	writtenTTL = 30 * time.Second
	writtenCap = 4096
)

// writtenMemo remembers how far each command's status got with this node's last write of
// it (started, final) until the node's cache shows it: a pass that reads a cached copy older
// than the node's own write (its watch event not delivered yet) writes nothing — it would
// only write the same status again — and the pass that event brings decides with the
// current copy. Bounded: entries expire after writtenTTL and at most writtenCap are kept
// (past it a write is not remembered, which costs at most a repeated write).
type writtenMemo struct {
	mu sync.Mutex
	m  map[types.UID]writtenEntry
}

type writtenEntry struct {
	rank       int
	generation int64
	at         time.Time
}

func newWrittenMemo() *writtenMemo { return &writtenMemo{m: map[types.UID]writtenEntry{}} }

// statusRank orders a command's status by how far it got: 0 nothing started, 1 started,
// 2 final.
func statusRank(conds []metav1.Condition) int {
	switch {
	case wbv1.CommandIsFinal(conds):
		return 2
	case meta.IsStatusConditionTrue(conds, wbv1.ConditionStarted):
		return 1
	}
	return 0
}

// note remembers that this node just wrote cmd's status as far as conds show.
func (w *writtenMemo) note(cmd *wbv1.TerminalCommand, conds []metav1.Condition, now time.Time) {
	rank := statusRank(conds)
	if rank == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.m[cmd.UID]; !ok && len(w.m) >= writtenCap {
		for uid, e := range w.m {
			if now.Sub(e.at) > writtenTTL {
				delete(w.m, uid)
			}
		}
		if len(w.m) >= writtenCap {
			return
		}
	}
	w.m[cmd.UID] = writtenEntry{rank: rank, generation: cmd.Generation, at: now}
}

// behind says whether cmd, as cached, is older than this node's last write of it (same
// generation, written within writtenTTL). Once the cache shows the write (or the entry is
// stale, or the spec changed since) the entry is dropped and the answer is false.
func (w *writtenMemo) behind(cmd *wbv1.TerminalCommand, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[cmd.UID]
	if !ok {
		return false
	}
	if e.generation == cmd.Generation && now.Sub(e.at) <= writtenTTL && statusRank(cmd.Status.Conditions) < e.rank {
		return true
	}
	delete(w.m, cmd.UID)
	return false
}

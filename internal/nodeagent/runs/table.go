// Package runs is the node agent's one implementation of the command path's exactly-once
// sequence, shared by TerminalCommands (the agent's command controller) and ActionRuns
// (internal/nodeagent/actionruns): the store records a run's start before any process
// exists, the process is started once that record landed and its pid recorded (Launch),
// a short run's start and outcome coalesce into one status write (Coalesce, RunningDue), its outcome
// is stored before status may show it (Record, Settle), and a stored start with no live
// run in this process ends interrupted, never re-run (Stored, OutcomeOf). Shutdown stops
// what still runs. Table is generic over the kind's outcome type. It imports no room.
package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// Outcome is the one recorded outcome of a run (a command's, an action run's): stored as
// JSON on the run's start record before status shows it. RecordedPhase is the phase the
// start record carries; an outcome whose phase is empty reads as none (Decode).
type Outcome interface {
	RecordedPhase() string
}

// CoalesceWindow bounds how long a pass waits for a just-started run to finish, so that
// one status write carries both its start and its outcome. On a loaded node a short
// command's exit, teardown and outcome commit take 15–40 ms: a shorter window sent most of
// them as two writes in a row (Running, then the outcome).
const CoalesceWindow = 50 * time.Millisecond

// Run is a run (a TerminalCommand or an ActionRun) this process started. Its exported
// fields are set by the caller before Launch (or EnterGuest) enters it, except Handle and
// Started (set by Launch), Result and Stopping (set under the table's lock: read them
// through Get, ResultOf or View) and Drained (set under View).
type Run[O Outcome] struct {
	Key     types.NamespacedName
	Handle  *procexec.Handle // nil for a command running in a VM guest
	Started time.Time
	Result  *O
	// persisted is set once Result is in the store; a pass that finds it unset persists
	// it (and fails, to be retried, when the store does) before status may show it.
	persisted bool
	// Stopping is set when the run's object is being deleted or cancelled: its end is
	// Cancelled.
	Stopping bool
	// Finished is closed once Result is set.
	Finished chan struct{}
	// pidDone is closed once the run's PID record is written (or superseded by its
	// outcome, or failed); nil for a run without one (a command in a VM guest). Coalesce
	// waits for it, so a Running status is never published before the record crash
	// recovery finds the process by.
	pidDone chan struct{}
	// storeMu orders the store writes of a host run: its PID record (written off the
	// pass, recordPID) never lands after, and so never hides, its outcome; outcomeStored
	// (guarded by storeMu) tells a late PID record that the outcome, which supersedes it,
	// is already stored.
	storeMu       sync.Mutex
	outcomeStored bool
	// Cancel ends the wait for a command running in a VM guest (no host handle).
	Cancel context.CancelFunc

	// Commands only.
	EnvUID string
	// Drained is set when the node is drained (cordoned) while the command runs: its end
	// is Failed/interrupted.
	Drained bool
	// Out and SeqFrom locate the command's output in its session's ring (the data plane's
	// output stream reads from them).
	Out     *ring.Ring
	SeqFrom uint64
}

// Table is the node's bookkeeping of the processes it started for one kind of run —
// TerminalCommands or ActionRuns — under its own lock, and the one implementation of the
// exactly-once sequence both controllers follow: the store records a run's start before any
// process exists (store.RecordCommandStart, by the caller), the process is started and its
// pid recorded (Launch), its outcome is stored before status may show it (Record, Settle),
// and a stored start with no live run in this process means a previous process started it:
// the run ends interrupted, never re-run (Stored). A run is forgotten once status shows its
// outcome (bounded memory).
type Table[O Outcome] struct {
	kind string // names the runs in errors ("command", "action run")
	db   *store.DB

	mu   sync.Mutex
	runs map[string]*Run[O] // UID → running handle or finished result
	// closed is set once shutdown has taken the list of runs to stop: a process a late
	// pass starts after that is stopped and waited for by that pass itself.
	closed bool
	// guestStarting counts guest commands past the guest cap check and not yet entered
	// (ReserveGuest): the check and the entry are one reservation.
	guestStarting int
	// changed wakes its waiters when a run starts or is reconciled.
	changed nodekit.Broadcaster
}

// NewTable returns an empty table of one kind of run over db; kind names the runs in errors.
func NewTable[O Outcome](kind string, db *store.DB) *Table[O] {
	return &Table[O]{kind: kind, db: db, runs: map[string]*Run[O]{}}
}

// Get returns uid's live run (nil when this process did not start it) and, read under the
// lock, its result and whether that is stored.
func (t *Table[O]) Get(uid string) (lr *Run[O], result *O, persisted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lr = t.runs[uid]
	if lr != nil {
		result, persisted = lr.Result, lr.persisted // written under t.mu by the awaiting goroutine
	}
	return lr, result, persisted
}

// ResultOf reads lr's result under the lock (nil while it runs); lr may be forgotten.
func (t *Table[O]) ResultOf(lr *Run[O]) *O {
	t.mu.Lock()
	defer t.mu.Unlock()
	return lr.Result
}

// Settle returns uid's live run (nil when this process did not start it) with its outcome
// once it ended. An outcome the awaiting goroutine could not store is stored now, or the
// error fails the pass (retried with backoff): status never shows an unstored outcome.
func (t *Table[O]) Settle(uid string) (*Run[O], *O, error) {
	lr, result, persisted := t.Get(uid)
	if lr == nil || result == nil || persisted {
		return lr, result, nil
	}
	if err := t.persistRun(lr, uid, result); err != nil {
		return nil, nil, err
	}
	t.mu.Lock()
	lr.persisted = true
	t.mu.Unlock()
	return lr, result, nil
}

// Stored reads uid's start record: ok false when the store holds none (nothing of the run
// ever started on this node).
func (t *Table[O]) Stored(uid string) (rec store.Command, ok bool, err error) {
	rec, ok, err = t.db.Commands().Get(uid)
	if err != nil {
		return rec, false, fmt.Errorf("reading the start record of %s %s: %w", t.kind, uid, err)
	}
	return rec, ok, nil
}

// OutcomeOf is the outcome of a run whose start record rec a previous pass or process
// stored with no live run in this process: the stored outcome, or — none stored: it was
// running when its process ended — interrupted(), stored first. It is never re-run.
func (t *Table[O]) OutcomeOf(rec store.Command, interrupted func() *O) (*O, error) {
	if o := Decode[O](rec.Outcome); o != nil {
		return o, nil
	}
	o := interrupted()
	if err := t.persist(rec.UID, o); err != nil {
		return nil, err
	}
	return o, nil
}

// Decode reads a stored outcome (nil when none is).
func Decode[O Outcome](s string) *O {
	var o O
	if s == "" || json.Unmarshal([]byte(s), &o) != nil || o.RecordedPhase() == "" {
		return nil
	}
	return &o
}

// persist stores the one outcome on the run's start record. Every error surfaces: an
// outcome that is not stored is never shown as final.
func (t *Table[O]) persist(uid string, o *O) error {
	raw, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encoding the outcome of %s %s: %w", t.kind, uid, err)
	}
	rec, ok, err := t.db.Commands().Get(uid)
	if err != nil {
		return fmt.Errorf("reading the start record of %s %s: %w", t.kind, uid, err)
	}
	if !ok {
		return fmt.Errorf("%s %s has no start record to hold its outcome", t.kind, uid)
	}
	rec.Phase, rec.Outcome, rec.UpdatedAt = (*o).RecordedPhase(), string(raw), time.Now()
	if err := t.db.Commands().Put(rec); err != nil {
		return fmt.Errorf("storing the outcome of %s %s: %w", t.kind, uid, err)
	}
	return nil
}

// persistRun is persist for a live run, ordered after a PID record being written and
// telling a later one that the outcome supersedes it.
func (t *Table[O]) persistRun(lr *Run[O], uid string, o *O) error {
	lr.storeMu.Lock()
	defer lr.storeMu.Unlock()
	err := t.persist(uid, o)
	lr.outcomeStored = err == nil
	return err
}

func (t *Table[O]) run(uid string) *Run[O] {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs[uid]
}

// Record stores the outcome of a run that ended and hands it to the reconciler (result set,
// finished closed). adjust, under the lock, may rewrite o from the live run (one stopped by
// a deletion ends Cancelled). A store failure is returned and left for the next pass to
// retry (persisted unset).
func (t *Table[O]) Record(uid string, o *O, adjust func(lr *Run[O], o *O)) error {
	t.mu.Lock()
	if lr := t.runs[uid]; lr != nil && adjust != nil {
		adjust(lr, o)
	}
	t.mu.Unlock()
	var err error
	if lr := t.run(uid); lr != nil {
		err = t.persistRun(lr, uid, o)
	} else {
		err = t.persist(uid, o)
	}
	t.mu.Lock()
	if lr := t.runs[uid]; lr != nil {
		lr.Result, lr.persisted = o, err == nil
		if lr.Finished != nil {
			close(lr.Finished)
		}
	}
	t.mu.Unlock()
	return err
}

// Coalesce waits at most CoalesceWindow for a just-started run to end, so that one status
// write records both its start and its outcome; it returns the outcome then (else nil).
func (t *Table[O]) Coalesce(lr *Run[O]) *O {
	timer := time.NewTimer(CoalesceWindow)
	defer timer.Stop()
	select {
	case <-lr.Finished:
	case <-timer.C:
		// Not ended within the window: one last look below, so a run that ended while the
		// window ran out still gets one write. A Running status follows the PID record
		// (bounded by pidRecordWait): a crash after status says Running finds the process by
		// its record, not only through the cgroup sweep.
		if lr.pidDone != nil {
			wait := time.NewTimer(pidRecordWait)
			select {
			case <-lr.pidDone:
			case <-lr.Finished:
			case <-wait.C:
			}
			wait.Stop()
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !lr.persisted {
		return nil // an outcome the store lacks is never shown: the next pass stores it first
	}
	return lr.Result
}

// RunningDelay is how long a just-started host run's Running status is held back: a run
// that ends within it gets one status write carrying its admission, start and outcome
// (the outcome's wake writes it); one still running then gets its Running write (kstatus
// InProgress). Nothing of exactly-once waits on it: the start record was stored before the
// process existed, and a crash inside the window ends the run interrupted from that record.
// It is a timer's wake, not a wait: no reconcile worker blocks on it. On a loaded node a
// short command's exit, cgroup teardown and outcome commit often take longer than
// CoalesceWindow's 50 ms, which sent most of them as two writes (Running, then the
// outcome); 300 ms covers them at load 8 on two cores (docs/scale.md) and still shows a
// command of a second or more Running while it runs.
const RunningDelay = 300 * time.Millisecond

// RunningDue says how long until a pass may publish lr's Running status (0: now). A host
// run's Running status waits RunningDelay from its start (a run that ends sooner is written
// once, with its outcome), then for its PID record (bounded by pidRecordWait, as Coalesce):
// a crash after status says Running finds the process by its record. A run without a PID
// record (a command in a VM guest) is due at once.
func (t *Table[O]) RunningDue(lr *Run[O], now time.Time) time.Duration {
	if lr.pidDone == nil {
		return 0
	}
	if wait := lr.Started.Add(RunningDelay).Sub(now); wait > 0 {
		return wait
	}
	timer := time.NewTimer(pidRecordWait)
	defer timer.Stop()
	select {
	case <-lr.pidDone:
	case <-lr.Finished:
	case <-timer.C:
	}
	return 0
}

// Stop stops every running run match selects (deletion, drain) and marks it stopping, so
// its end is recorded Cancelled.
func (t *Table[O]) Stop(match func(*Run[O]) bool) []*Run[O] {
	t.mu.Lock()
	var stop []*Run[O]
	for _, lr := range t.runs {
		if lr.Result == nil && match(lr) {
			lr.Stopping = true
			stop = append(stop, lr)
		}
	}
	t.mu.Unlock()
	for _, lr := range stop {
		if lr.Handle != nil {
			lr.Handle.Kill(procexec.OriginCancel)
		}
		if lr.Cancel != nil {
			lr.Cancel()
		}
	}
	return stop
}

// Forget drops a finished run from memory once its outcome is stored.
func (t *Table[O]) Forget(uid string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if lr := t.runs[uid]; lr != nil && lr.Result != nil && lr.persisted {
		delete(t.runs, uid)
	}
}

// Shutdown marks the table closed and stops every running run: host processes are
// killed (returned, to wait for), guest ones stop being waited for (the store keeps them
// interrupted).
func (t *Table[O]) Shutdown() []*procexec.Handle {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	var ending []*procexec.Handle
	for _, lr := range t.runs {
		if lr.Handle != nil && lr.Result == nil {
			lr.Handle.Kill(procexec.OriginCancel)
			ending = append(ending, lr.Handle)
		}
		if lr.Cancel != nil && lr.Result == nil {
			lr.Cancel()
		}
	}
	return ending
}

// View runs f with the table locked (f must not block).
func (t *Table[O]) View(f func(runs map[string]*Run[O])) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(t.runs)
}

// Has says whether uid is a live run of this process.
func (t *Table[O]) Has(uid string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.runs[uid]
	return ok
}

// guestRunning counts the guest commands running or reserved.
func (t *Table[O]) guestRunningLocked() int {
	n := t.guestStarting
	for _, lr := range t.runs {
		if lr.Cancel != nil && lr.Result == nil {
			n++
		}
	}
	return n
}

// GuestRunning counts the guest commands running or reserved.
func (t *Table[O]) GuestRunning() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.guestRunningLocked()
}

// ReserveGuest reserves a guest command slot below limit: ok false (with the count) at the
// cap. release gives the slot back unless the command was entered with EnterGuest.
func (t *Table[O]) ReserveGuest(limit int) (running int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	running = t.guestRunningLocked()
	if running >= limit {
		return running, false
	}
	t.guestStarting++
	return running, true
}

// ReleaseGuest gives back a reservation of ReserveGuest that entered nothing.
func (t *Table[O]) ReleaseGuest() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.guestStarting--
}

// EnterGuest enters a reserved guest command as uid's live run: its reservation becomes
// the run's own entry.
func (t *Table[O]) EnterGuest(uid string, lr *Run[O]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs[uid] = lr
	t.guestStarting--
	t.changed.Broadcast()
}

// Changed returns a channel closed at the next change (a run started or reconciled).
func (t *Table[O]) Changed() <-chan struct{} { return t.changed.Changed() }

// Signal wakes Changed's waiters.
func (t *Table[O]) Signal() { t.changed.Broadcast() }

// Len is the number of runs held (running or finished and not yet forgotten).
func (t *Table[O]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.runs)
}

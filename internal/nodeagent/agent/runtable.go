package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// outcome is the one recorded outcome of a run (commandOutcome, actionOutcome): stored on
// the run's start record before status shows it.
type outcome interface {
	commandOutcome | actionOutcome
	recordedPhase() string
}

func (o commandOutcome) recordedPhase() string { return string(o.Phase) }
func (o actionOutcome) recordedPhase() string  { return string(o.Phase) }

// liveRun is a run (a TerminalCommand or an ActionRun) this process started.
type liveRun[O outcome] struct {
	key     types.NamespacedName
	handle  *procexec.Handle // nil for a command running in a VM guest
	started time.Time
	result  *O
	// persisted is set once result is in the store; a pass that finds it unset persists
	// it (and fails, to be retried, when the store does) before status may show it.
	persisted bool
	// stopping is set when the run's object is being deleted or cancelled: its end is
	// Cancelled.
	stopping bool
	// finished is closed once result is set.
	finished chan struct{}
	// pidDone is closed once the run's PID record is written (or superseded by its
	// outcome, or failed); nil for a run without one (a command in a VM guest). coalesce
	// waits for it, so a Running status is never published before the record crash
	// recovery finds the process by.
	pidDone chan struct{}
	// storeMu orders the store writes of a host run: its PID record (written off the
	// pass, recordPID) never lands after, and so never hides, its outcome; outcomeStored
	// (guarded by storeMu) tells a late PID record that the outcome, which supersedes it,
	// is already stored.
	storeMu       sync.Mutex
	outcomeStored bool
	// cancel ends the wait for a command running in a VM guest (no host handle).
	cancel context.CancelFunc

	// Commands only.
	envUID string
	// drained is set when the node is drained (cordoned) while the command runs: its end
	// is Failed/interrupted (node_drain.go).
	drained bool
	// out and seqFrom locate the command's output in its session's ring (the data plane's
	// output stream reads from them).
	out     *ring.Ring
	seqFrom uint64
}

// liveCommand is a TerminalCommand this process started; liveAction an ActionRun.
type (
	liveCommand = liveRun[commandOutcome]
	liveAction  = liveRun[actionOutcome]
)

// runTable is the node's bookkeeping of the processes it started for one kind of run —
// TerminalCommands or ActionRuns — under its own lock, and the one implementation of the
// exactly-once sequence both controllers follow: the store records a run's start before any
// process exists (store.RecordCommandStart, by the caller), the process is started and its
// pid recorded (launch), its outcome is stored before status may show it (record, settle),
// and a stored start with no live run in this process means a previous process started it:
// the run ends interrupted, never re-run (stored). A run is forgotten once status shows its
// outcome (bounded memory).
type runTable[O outcome] struct {
	kind string // names the runs in errors ("command", "action run")
	db   *store.DB

	mu   sync.Mutex
	runs map[string]*liveRun[O] // UID → running handle or finished result
	// closed is set once shutdown has taken the list of runs to stop: a process a late
	// pass starts after that is stopped and waited for by that pass itself.
	closed bool
	// guestStarting counts guest commands past the guest cap check and not yet entered
	// (reserveGuest): the check and the entry are one reservation.
	guestStarting int
	// changed wakes its waiters when a run starts or is reconciled.
	changed changeBroadcast
}

func newRunTable[O outcome](kind string, db *store.DB) *runTable[O] {
	return &runTable[O]{kind: kind, db: db, runs: map[string]*liveRun[O]{}}
}

// get returns uid's live run (nil when this process did not start it) and, read under the
// lock, its result and whether that is stored.
func (t *runTable[O]) get(uid string) (lr *liveRun[O], result *O, persisted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lr = t.runs[uid]
	if lr != nil {
		result, persisted = lr.result, lr.persisted // written under t.mu by the awaiting goroutine
	}
	return lr, result, persisted
}

// resultOf reads lr's result under the lock (nil while it runs); lr may be forgotten.
func (t *runTable[O]) resultOf(lr *liveRun[O]) *O {
	t.mu.Lock()
	defer t.mu.Unlock()
	return lr.result
}

// settle returns uid's live run (nil when this process did not start it) with its outcome
// once it ended. An outcome the awaiting goroutine could not store is stored now, or the
// error fails the pass (retried with backoff): status never shows an unstored outcome.
func (t *runTable[O]) settle(uid string) (*liveRun[O], *O, error) {
	lr, result, persisted := t.get(uid)
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

// stored reads uid's start record: ok false when the store holds none (nothing of the run
// ever started on this node).
func (t *runTable[O]) stored(uid string) (rec store.Command, ok bool, err error) {
	rec, ok, err = t.db.Commands().Get(uid)
	if err != nil {
		return rec, false, fmt.Errorf("reading the start record of %s %s: %w", t.kind, uid, err)
	}
	return rec, ok, nil
}

// outcomeOf is the outcome of a run whose start record rec a previous pass or process
// stored with no live run in this process: the stored outcome, or — none stored: it was
// running when its process ended — interrupted(), stored first. It is never re-run.
func (t *runTable[O]) outcomeOf(rec store.Command, interrupted func() *O) (*O, error) {
	if o := decodeOutcome[O](rec.Outcome); o != nil {
		return o, nil
	}
	o := interrupted()
	if err := t.persist(rec.UID, o); err != nil {
		return nil, err
	}
	return o, nil
}

// decodeOutcome reads a stored outcome (nil when none is).
func decodeOutcome[O outcome](s string) *O {
	var o O
	if s == "" || json.Unmarshal([]byte(s), &o) != nil || o.recordedPhase() == "" {
		return nil
	}
	return &o
}

// persist stores the one outcome on the run's start record. Every error surfaces: an
// outcome that is not stored is never shown as final.
func (t *runTable[O]) persist(uid string, o *O) error {
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
	rec.Phase, rec.Outcome, rec.UpdatedAt = (*o).recordedPhase(), string(raw), time.Now()
	if err := t.db.Commands().Put(rec); err != nil {
		return fmt.Errorf("storing the outcome of %s %s: %w", t.kind, uid, err)
	}
	return nil
}

// persistRun is persist for a live run, ordered after a PID record being written and
// telling a later one that the outcome supersedes it.
func (t *runTable[O]) persistRun(lr *liveRun[O], uid string, o *O) error {
	lr.storeMu.Lock()
	defer lr.storeMu.Unlock()
	err := t.persist(uid, o)
	lr.outcomeStored = err == nil
	return err
}

func (t *runTable[O]) run(uid string) *liveRun[O] {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs[uid]
}

// startRefusal classifies an error of the runner's Start: a refusal (a cap) means nothing
// started (refused, with its code); any other error is a failure to start.
func startRefusal(err error) (refused bool, code string) {
	if c := string(actuation.CodeOf(err)); c != "" {
		return true, c
	}
	return false, string(actuation.CodeStartFailed)
}

// errNotRecorded aborts a sandbox whose run's start record (or claim) did not land.
var errNotRecorded = errors.New("the start was not recorded or claimed: the program is not run")

// pidRecordDelay is how long the PID record of a run in its own cgroup waits for the run to
// end: a run that ends sooner gets one store commit, its outcome's, instead of two in a
// row. Crash recovery does not need the PID inside that window: it kills every command
// cgroup the previous process left (sweepCgroups), and the start record, stored before the
// program ran, marks the run interrupted.
const pidRecordDelay = coalesceWindow

// pidRecordWait bounds how long a Running status waits for the run's PID record (one store
// commit); past it the status is written anyway and recovery relies on the cgroup sweep.
const pidRecordWait = 2 * time.Second

// launchSpec is what launch needs of one run.
type launchSpec[O outcome] struct {
	uid     string
	spec    procexec.Spec
	running string      // the phase of the PID record
	live    *liveRun[O] // entered live once the process runs (handle and started set)
	// record makes the run's durable start record (store.RecordCommandStart, and a fast
	// path's claim), concurrently with the sandbox's set-up; proceed false: nothing may
	// run (a refusal, a replay or a lost claim, which record handled).
	record func() (rec store.Command, proceed bool, err error)
	// ready runs once the start is recorded, right before the program is exec'd.
	ready func()
	// startFailed is the outcome of a run the runner did not start.
	startFailed func(error) *O
	// pidDelay: the run has its own cgroup (crash recovery sweeps it), so its PID record
	// may wait pidRecordDelay for the run to end.
	pidDelay bool
	// pidRecorded reports the PID record's write (nil error: written).
	pidRecorded func(error)
}

// launch starts a run's process under the one exactly-once sequence: ls.record runs while
// the runner sets up the sandbox, and the program is exec'd only once it landed
// (spec.BeforeExec; a helper that never gets the go-ahead ends without running anything,
// also when this process dies). proceed false: nothing ran (err is record's error). When the
// runner does not start the process, startFailed's outcome is stored and returned (o).
// Otherwise ls.live is entered live and its PID record written off the pass (recordPID);
// late says the agent is shutting down (the caller stops and waits for the process itself,
// after starting its awaiting goroutine).
func (t *runTable[O]) launch(runner *procexec.Runner, ls launchSpec[O]) (h *procexec.Handle, o *O, late, proceed bool, err error) {
	type recorded struct {
		rec     store.Command
		proceed bool
		err     error
	}
	recDone := make(chan recorded, 1)
	go func() {
		rec, proceed, err := ls.record()
		recDone <- recorded{rec, proceed, err}
	}()
	var recRes *recorded
	awaitRecord := func() recorded {
		if recRes == nil {
			v := <-recDone
			recRes = &v
		}
		return *recRes
	}
	spec := ls.spec
	spec.BeforeExec = func() error {
		if rr := awaitRecord(); rr.err != nil || !rr.proceed {
			return errNotRecorded
		}
		if ls.ready != nil {
			ls.ready()
		}
		return nil
	}
	h, startErr := runner.Start(context.Background(), spec)
	rr := awaitRecord()
	if rr.err != nil || !rr.proceed {
		if h != nil { // never: the program runs only after BeforeExec
			h.Kill(procexec.OriginCancel)
		}
		return nil, nil, false, false, rr.err
	}
	if startErr != nil {
		o = ls.startFailed(startErr)
		if err := t.persist(ls.uid, o); err != nil {
			return nil, nil, false, true, err
		}
		return nil, o, false, true, nil
	}
	rec := rr.rec
	info := h.Info()
	rec.PID, rec.PGID, rec.StartTime, rec.Phase, rec.UpdatedAt = info.Pid, info.Pgid, info.StartTime, ls.running, time.Now()
	lr := ls.live
	lr.handle, lr.started = h, time.Now()
	lr.pidDone = make(chan struct{})
	late = t.enter(ls.uid, lr)
	go t.recordPID(lr, rec, ls.pidDelay, ls.pidRecorded)
	return h, nil, late, true, nil
}

// recordPID stores the pid, process group and start time of a running run for crash
// recovery, off the pass that started it; with delay, once the run ended or after
// pidRecordDelay. Under the run's storeMu: once its outcome is stored (which supersedes the
// PID record) nothing is written.
func (t *runTable[O]) recordPID(lr *liveRun[O], rec store.Command, delay bool, done func(error)) {
	if lr.pidDone != nil {
		defer close(lr.pidDone)
	}
	if delay {
		timer := time.NewTimer(pidRecordDelay)
		select {
		case <-lr.finished:
		case <-timer.C:
		}
		timer.Stop()
	}
	lr.storeMu.Lock()
	defer lr.storeMu.Unlock()
	if lr.outcomeStored {
		return
	}
	err := t.db.Commands().Put(rec)
	if err != nil {
		err = fmt.Errorf("recording the pid of %s %s: %w", t.kind, rec.UID, err)
	}
	if done != nil {
		done(err)
	}
}

// enter makes lr uid's live run and tells whether the agent is already shutting down.
func (t *runTable[O]) enter(uid string, lr *liveRun[O]) (late bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs[uid] = lr
	t.changed.notify()
	return t.closed
}

// record stores the outcome of a run that ended and hands it to the reconciler (result set,
// finished closed). adjust, under the lock, may rewrite o from the live run (one stopped by
// a deletion ends Cancelled). A store failure is returned and left for the next pass to
// retry (persisted unset).
func (t *runTable[O]) record(uid string, o *O, adjust func(lr *liveRun[O], o *O)) error {
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
		lr.result, lr.persisted = o, err == nil
		if lr.finished != nil {
			close(lr.finished)
		}
	}
	t.mu.Unlock()
	return err
}

// coalesce waits at most coalesceWindow for a just-started run to end, so that one status
// write records both its start and its outcome; it returns the outcome then (else nil).
func (t *runTable[O]) coalesce(lr *liveRun[O]) *O {
	timer := time.NewTimer(coalesceWindow)
	defer timer.Stop()
	select {
	case <-lr.finished:
	case <-timer.C:
		// Not ended within the window: one last look below, so a run that ended while the
		// window ran out still gets one write. A Running status follows the PID record
		// (bounded by pidRecordWait): a crash after status says Running finds the process by
		// its record, not only through the cgroup sweep.
		if lr.pidDone != nil {
			wait := time.NewTimer(pidRecordWait)
			select {
			case <-lr.pidDone:
			case <-lr.finished:
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
	return lr.result
}

// stop stops every running run match selects (deletion, drain) and marks it stopping, so
// its end is recorded Cancelled.
func (t *runTable[O]) stop(match func(*liveRun[O]) bool) []*liveRun[O] {
	t.mu.Lock()
	var stop []*liveRun[O]
	for _, lr := range t.runs {
		if lr.result == nil && match(lr) {
			lr.stopping = true
			stop = append(stop, lr)
		}
	}
	t.mu.Unlock()
	for _, lr := range stop {
		if lr.handle != nil {
			lr.handle.Kill(procexec.OriginCancel)
		}
		if lr.cancel != nil {
			lr.cancel()
		}
	}
	return stop
}

// forget drops a finished run from memory once its outcome is stored.
func (t *runTable[O]) forget(uid string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if lr := t.runs[uid]; lr != nil && lr.result != nil && lr.persisted {
		delete(t.runs, uid)
	}
}

// shutdown marks the table closed and stops every running run: host processes are
// killed (returned, to wait for), guest ones stop being waited for (the store keeps them
// interrupted).
func (t *runTable[O]) shutdown() []*procexec.Handle {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	var ending []*procexec.Handle
	for _, lr := range t.runs {
		if lr.handle != nil && lr.result == nil {
			lr.handle.Kill(procexec.OriginCancel)
			ending = append(ending, lr.handle)
		}
		if lr.cancel != nil && lr.result == nil {
			lr.cancel()
		}
	}
	return ending
}

// view runs f with the table locked (f must not block).
func (t *runTable[O]) view(f func(runs map[string]*liveRun[O])) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(t.runs)
}

// has says whether uid is a live run of this process.
func (t *runTable[O]) has(uid string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.runs[uid]
	return ok
}

// guestRunning counts the guest commands running or reserved.
func (t *runTable[O]) guestRunningLocked() int {
	n := t.guestStarting
	for _, lr := range t.runs {
		if lr.cancel != nil && lr.result == nil {
			n++
		}
	}
	return n
}

// guestRunning counts the guest commands running or reserved.
func (t *runTable[O]) guestRunning() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.guestRunningLocked()
}

// reserveGuest reserves a guest command slot below limit: ok false (with the count) at the
// cap. release gives the slot back unless the command was entered with enterGuest.
func (t *runTable[O]) reserveGuest(limit int) (running int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	running = t.guestRunningLocked()
	if running >= limit {
		return running, false
	}
	t.guestStarting++
	return running, true
}

// releaseGuest gives back a reservation of reserveGuest that entered nothing.
func (t *runTable[O]) releaseGuest() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.guestStarting--
}

// enterGuest enters a reserved guest command as uid's live run: its reservation becomes
// the run's own entry.
func (t *runTable[O]) enterGuest(uid string, lr *liveRun[O]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs[uid] = lr
	t.guestStarting--
	t.changed.notify()
}

// changedSignal returns a channel closed at the next change (a run started or reconciled).
func (t *runTable[O]) changedSignal() <-chan struct{} { return t.changed.wait() }

// signal wakes changedSignal's waiters.
func (t *runTable[O]) signal() { t.changed.notify() }

// len is the number of runs held (running or finished and not yet forgotten).
func (t *runTable[O]) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.runs)
}

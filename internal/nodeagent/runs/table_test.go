package runs

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/procexec"
)

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper() // the launch test starts real sandboxed processes
	os.Exit(m.Run())
}

// commandOutcome is a run outcome as the command path records one.
type commandOutcome struct {
	Phase       wbv1.CommandPhase `json:"phase"`
	ExitCode    *int32            `json:"exitCode,omitempty"`
	RefusalCode string            `json:"refusalCode,omitempty"`
	Message     string            `json:"message,omitempty"`
	Completed   time.Time         `json:"completed"`
}

func (o commandOutcome) RecordedPhase() string { return string(o.Phase) }

// liveCommand is a command run of the table.
type liveCommand = Run[commandOutcome]

// commandStartFailed is the outcome of a command the runner did not start: Refused with
// the runner's code at a cap, else Failed (start-failed).
func commandStartFailed(err error) *commandOutcome {
	o := &commandOutcome{Phase: wbv1.CommandRefused, Message: err.Error(), Completed: time.Now()}
	if refused, code := StartRefusal(err); refused {
		o.RefusalCode = code
	} else {
		o.Phase, o.RefusalCode = wbv1.CommandFailed, code
	}
	return o
}

func openTable(t *testing.T) (*Table[commandOutcome], *store.DB) {
	t.Helper()
	db, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return NewTable[commandOutcome]("command", db), db
}

func startRecord(t *testing.T, db *store.DB, uid string) store.Command {
	t.Helper()
	rec, created, err := db.RecordCommandStart(store.Command{UID: uid, Namespace: "ns", Name: uid})
	if err != nil || !created {
		t.Fatalf("RecordCommandStart(%s) = created %v, %v", uid, created, err)
	}
	return rec
}

func storedOutcome(t *testing.T, db *store.DB, uid string) *commandOutcome {
	t.Helper()
	rec, ok, err := db.Commands().Get(uid)
	if err != nil || !ok {
		t.Fatalf("no start record of %s: %v", uid, err)
	}
	return Decode[commandOutcome](rec.Outcome)
}

// An outcome is in the store before the table hands it to the reconciler, and a stopped
// run's adjustment (Cancelled) is what is stored.
func TestRunTableRecordStoresBeforeShowing(t *testing.T) {
	tab, db := openTable(t)
	startRecord(t, db, "u1")
	lc := &liveCommand{Finished: make(chan struct{})}
	if late := tab.enter("u1", lc); late {
		t.Fatal("a table not shut down reports late")
	}
	tab.Stop(func(*liveCommand) bool { return true })
	o := &commandOutcome{Phase: wbv1.CommandFailed, Message: "killed", Completed: time.Now()}
	err := tab.Record("u1", o, func(lc *liveCommand, o *commandOutcome) {
		if lc.Stopping {
			o.Phase = wbv1.CommandCancelled
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lc.Finished:
	default:
		t.Fatal("finished not closed after record")
	}
	_, res, persisted := tab.Get("u1")
	if res == nil || !persisted || res.Phase != wbv1.CommandCancelled {
		t.Fatalf("get after record = %+v persisted %v; want Cancelled, persisted", res, persisted)
	}
	if got := storedOutcome(t, db, "u1"); got == nil || got.Phase != wbv1.CommandCancelled {
		t.Fatalf("stored outcome %+v; want Cancelled", got)
	}
	tab.Forget("u1")
	if tab.Has("u1") || tab.Len() != 0 {
		t.Fatal("a stored, finished run is still held after forget")
	}
}

// A store failure leaves the outcome unstored (persisted unset, not forgotten); Settle
// stores it on the next pass, or fails that pass.
func TestRunTableSettleStoresWhatRecordCouldNot(t *testing.T) {
	tab, db := openTable(t)
	lc := &liveCommand{Finished: make(chan struct{})}
	tab.enter("u2", lc)
	o := &commandOutcome{Phase: wbv1.CommandSucceeded, Completed: time.Now()}
	if err := tab.Record("u2", o, nil); err == nil {
		t.Fatal("record without a start record succeeded")
	}
	tab.Forget("u2")
	if !tab.Has("u2") {
		t.Fatal("an unstored outcome was forgotten")
	}
	if _, _, err := tab.Settle("u2"); err == nil {
		t.Fatal("settle stored an outcome with no start record")
	}
	startRecord(t, db, "u2")
	live, res, err := tab.Settle("u2")
	if err != nil || live != lc || res != o {
		t.Fatalf("settle = %v %+v %v", live, res, err)
	}
	if _, _, persisted := tab.Get("u2"); !persisted {
		t.Fatal("settle did not mark the outcome stored")
	}
	if got := storedOutcome(t, db, "u2"); got == nil || got.Phase != wbv1.CommandSucceeded {
		t.Fatalf("stored outcome %+v", got)
	}
}

// A start record without an outcome (its process ended with the agent) becomes the stored
// interrupted outcome, once; a stored outcome is returned as it is.
func TestRunTableOutcomeOfInterruptedOnce(t *testing.T) {
	tab, db := openTable(t)
	rec := startRecord(t, db, "u3")
	calls := 0
	interrupted := func() *commandOutcome {
		calls++
		return &commandOutcome{Phase: wbv1.CommandFailed, RefusalCode: string(actuation.CodeInterrupted), Completed: time.Now()}
	}
	o, err := tab.OutcomeOf(rec, interrupted)
	if err != nil || o.RefusalCode != string(actuation.CodeInterrupted) {
		t.Fatalf("outcomeOf = %+v, %v", o, err)
	}
	rec, ok, err := tab.Stored("u3")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	o2, err := tab.OutcomeOf(rec, interrupted)
	if err != nil || calls != 1 || o2.RefusalCode != string(actuation.CodeInterrupted) {
		t.Fatalf("second outcomeOf = %+v, %v after %d interrupted outcomes; want the stored one", o2, err, calls)
	}
}

// Launch runs the program only once its start record landed, enters it live and writes
// its PID record off the pass; a start the record step refuses runs nothing; at the
// runner's cap the start is refused with its code and that outcome is stored; after
// shutdown a launch reports late.
func TestRunTableLaunch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the process sandbox needs root")
	}
	tmp := t.TempDir()
	if err := procexec.CheckSandbox(procexec.StartOptions{}, tmp); err != nil {
		t.Skipf("no process sandbox on this machine: %v", err)
	}
	tab, db := openTable(t)
	runner := procexec.NewRunner(procexec.Limits{MaxConcurrent: 1, TempBase: tmp})
	work := t.TempDir()
	spec := func(argv ...string) procexec.Spec {
		return procexec.Spec{Argv: argv, Dir: work, WritableRoots: []string{work}, Timeout: time.Minute, Network: procexec.NetworkNone}
	}
	launch := func(uid string, sp procexec.Spec, record func() (store.Command, bool, error), pid chan error) (*procexec.Handle, *commandOutcome, bool, bool, *liveCommand, error) {
		lc := &liveCommand{Finished: make(chan struct{})}
		h, o, late, proceed, err := tab.Launch(runner, LaunchSpec[commandOutcome]{UID: uid, Spec: sp, Running: string(wbv1.CommandRunning), Live: lc,
			Record: record, StartFailed: commandStartFailed, PIDRecorded: func(err error) {
				if pid != nil {
					pid <- err
				}
			}})
		return h, o, late, proceed, lc, err
	}
	recorded := func(uid string) func() (store.Command, bool, error) {
		return func() (store.Command, bool, error) {
			rec, created, err := db.RecordCommandStart(store.Command{UID: uid, Namespace: "ns", Name: uid})
			return rec, created, err
		}
	}

	// Refused by the record step: the sandbox is set up, the program never runs.
	marker := filepath.Join(work, "ran")
	h, o, _, proceed, _, err := launch("u0", spec("/bin/touch", marker), func() (store.Command, bool, error) { return store.Command{}, false, nil }, nil)
	if err != nil || proceed || h != nil || o != nil {
		t.Fatalf("launch refused by its record = %v %+v proceed %v %v", h, o, proceed, err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the program ran without its start record: %v", err)
	}

	pid := make(chan error, 1)
	h, o, late, proceed, lc, err := launch("u4", spec("/bin/sleep", "30"), recorded("u4"), pid)
	if err != nil || o != nil || late || !proceed || h == nil {
		t.Fatalf("launch = %v %+v late %v proceed %v %v", h, o, late, proceed, err)
	}
	if err := <-pid; err != nil {
		t.Fatal(err)
	}
	rec, _, _ := tab.Stored("u4")
	if rec.PID != h.Info().Pid || rec.Phase != string(wbv1.CommandRunning) || lc.Handle != h || lc.Started.IsZero() || !tab.Has("u4") {
		t.Fatalf("after launch: record %+v, live %+v", rec, lc)
	}

	h2, o2, _, _, _, err := launch("u5", spec("/bin/true"), recorded("u5"), nil)
	if err != nil || h2 != nil || o2 == nil || o2.Phase != wbv1.CommandRefused || o2.RefusalCode != string(actuation.CodeCommandCapReached) {
		t.Fatalf("launch at the cap = %v %+v %v; want Refused %s", h2, o2, err, actuation.CodeCommandCapReached)
	}
	if got := storedOutcome(t, db, "u5"); got == nil || got.RefusalCode != string(actuation.CodeCommandCapReached) || tab.Has("u5") {
		t.Fatalf("refused start: stored %+v, live %v", got, tab.Has("u5"))
	}

	ending := tab.Shutdown()
	if len(ending) != 1 || ending[0] != h {
		t.Fatalf("shutdown stops %d processes; want the one running", len(ending))
	}
	<-h.Done()
	h3, _, late, _, _, err := launch("u6", spec("/bin/true"), recorded("u6"), nil)
	if err != nil || !late {
		t.Fatalf("launch after shutdown: late %v, %v", late, err)
	}
	h3.Kill(procexec.OriginCancel)
	<-h3.Done()
}

// Once a run's outcome is stored, a PID record written late never hides it.
func TestRunTablePIDRecordNeverHidesTheOutcome(t *testing.T) {
	tab, db := openTable(t)
	rec := startRecord(t, db, "u8")
	lc := &liveCommand{Finished: make(chan struct{})}
	tab.enter("u8", lc)
	if err := tab.Record("u8", &commandOutcome{Phase: wbv1.CommandSucceeded, Completed: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	rec.PID, rec.Phase = 4242, string(wbv1.CommandRunning)
	wrote := false
	tab.recordPID(lc, rec, true, func(error) { wrote = true })
	if wrote {
		t.Fatal("the PID record was written after the outcome")
	}
	if got := storedOutcome(t, db, "u8"); got == nil || got.Phase != wbv1.CommandSucceeded {
		t.Fatalf("stored outcome %+v", got)
	}
}

// Guest reservations count against the cap until entered or released: concurrent passes
// never exceed it.
func TestRunTableGuestReservations(t *testing.T) {
	tab, _ := openTable(t)
	const limit = 3
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, ok := tab.ReserveGuest(limit); ok {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if granted != limit || tab.GuestRunning() != limit {
		t.Fatalf("%d reservations granted, %d counted; want %d", granted, tab.GuestRunning(), limit)
	}
	tab.EnterGuest("g1", &liveCommand{Cancel: func() {}, Finished: make(chan struct{})})
	tab.ReleaseGuest()
	if n := tab.GuestRunning(); n != 2 {
		t.Fatalf("after one entry and one release: %d counted; want 2", n)
	}
	if _, ok := tab.ReserveGuest(limit); !ok {
		t.Fatal("a freed slot is not granted")
	}
	if running, ok := tab.ReserveGuest(limit); ok || running != limit {
		t.Fatalf("reserve at the cap = %d %v", running, ok)
	}
}

// Changed closes at the next change and is replaced.
func TestRunTableChangedSignal(t *testing.T) {
	tab, _ := openTable(t)
	ch := tab.Changed()
	tab.enter("u7", &liveCommand{})
	select {
	case <-ch:
	default:
		t.Fatal("entering a run did not signal")
	}
	next := tab.Changed()
	select {
	case <-next:
		t.Fatal("a fresh signal is already closed")
	default:
	}
	tab.Signal()
	<-next
}

// A host run's Running status is held back RunningDelay from its start (a short run is
// written once, with its outcome), then waits for its PID record; a guest run (no PID
// record) is due at once. The clock is passed in: no timed assertion.
func TestRunTableRunningDue(t *testing.T) {
	tab, _ := openTable(t)
	start := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	host := &liveCommand{Started: start, Finished: make(chan struct{}), pidDone: make(chan struct{})}
	if got := tab.RunningDue(host, start); got != RunningDelay {
		t.Fatalf("RunningDue at the start = %v, want %v", got, RunningDelay)
	}
	if got := tab.RunningDue(host, start.Add(RunningDelay/4)); got != RunningDelay*3/4 {
		t.Fatalf("RunningDue a quarter in = %v, want %v", got, RunningDelay*3/4)
	}
	close(host.pidDone) // the PID record landed
	if got := tab.RunningDue(host, start.Add(RunningDelay)); got != 0 {
		t.Fatalf("RunningDue after the delay with the PID record stored = %v, want 0", got)
	}
	ended := &liveCommand{Started: start, Finished: make(chan struct{}), pidDone: make(chan struct{})}
	close(ended.Finished) // ended before its PID record: nothing to wait for
	if got := tab.RunningDue(ended, start.Add(2*RunningDelay)); got != 0 {
		t.Fatalf("RunningDue of an ended run = %v, want 0", got)
	}
	guest := &liveCommand{Started: start, Finished: make(chan struct{})}
	if got := tab.RunningDue(guest, start); got != 0 {
		t.Fatalf("RunningDue of a guest run = %v, want 0 (written with its dispatch)", got)
	}
}

package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// Starting a run: the start record lands while the sandbox is set up, the program is
// exec'd only once it did, and the PID record follows off the pass.

// StartRefusal classifies an error of the runner's Start: a refusal (a cap) means nothing
// started (refused, with its code); any other error is a failure to start.
func StartRefusal(err error) (refused bool, code string) {
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
const pidRecordDelay = CoalesceWindow

// pidRecordWait bounds how long a Running status waits for the run's PID record (one store
// commit); past it the status is written anyway and recovery relies on the cgroup sweep.
const pidRecordWait = 2 * time.Second

// LaunchSpec is what Launch needs of one run.
type LaunchSpec[O Outcome] struct {
	UID     string
	Spec    procexec.Spec
	Running string  // the phase of the PID record
	Live    *Run[O] // entered live once the process runs (Handle and Started set)
	// Record makes the run's durable start record (store.RecordCommandStart, and a fast
	// path's claim), concurrently with the sandbox's set-up; proceed false: nothing may
	// run (a refusal, a replay or a lost claim, which Record handled).
	Record func() (rec store.Command, proceed bool, err error)
	// Ready (optional) runs once the start is recorded, right before the program is exec'd.
	Ready func()
	// StartFailed is the outcome of a run the runner did not start.
	StartFailed func(error) *O
	// PIDDelay: the run has its own cgroup (crash recovery sweeps it), so its PID record
	// may wait pidRecordDelay for the run to end.
	PIDDelay bool
	// PIDRecorded (optional) reports the PID record's write (nil error: written).
	PIDRecorded func(error)
}

// Launch starts a run's process under the one exactly-once sequence: ls.Record runs while
// the runner sets up the sandbox, and the program is exec'd only once it landed
// (spec.BeforeExec; a helper that never gets the go-ahead ends without running anything,
// also when this process dies). proceed false: nothing ran (err is Record's error). When the
// runner does not start the process, StartFailed's outcome is stored and returned (o).
// Otherwise ls.Live is entered live and its PID record written off the pass (recordPID);
// late says the agent is shutting down (the caller stops and waits for the process itself,
// after starting its awaiting goroutine).
func (t *Table[O]) Launch(runner *procexec.Runner, ls LaunchSpec[O]) (h *procexec.Handle, o *O, late, proceed bool, err error) {
	type recorded struct {
		rec     store.Command
		proceed bool
		err     error
	}
	recDone := make(chan recorded, 1)
	go func() {
		rec, proceed, err := ls.Record()
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
	spec := ls.Spec
	spec.BeforeExec = func() error {
		if rr := awaitRecord(); rr.err != nil || !rr.proceed {
			return errNotRecorded
		}
		if ls.Ready != nil {
			ls.Ready()
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
		o = ls.StartFailed(startErr)
		if err := t.persist(ls.UID, o); err != nil {
			return nil, nil, false, true, err
		}
		return nil, o, false, true, nil
	}
	rec := rr.rec
	info := h.Info()
	rec.PID, rec.PGID, rec.StartTime, rec.Phase, rec.UpdatedAt = info.Pid, info.Pgid, info.StartTime, ls.Running, time.Now()
	lr := ls.Live
	lr.Handle, lr.Started = h, time.Now()
	lr.pidDone = make(chan struct{})
	late = t.enter(ls.UID, lr)
	go t.recordPID(lr, rec, ls.PIDDelay, ls.PIDRecorded)
	return h, nil, late, true, nil
}

// recordPID stores the pid, process group and start time of a running run for crash
// recovery, off the pass that started it; with delay, once the run ended or after
// pidRecordDelay. Under the run's storeMu: once its outcome is stored (which supersedes the
// PID record) nothing is written.
func (t *Table[O]) recordPID(lr *Run[O], rec store.Command, delay bool, done func(error)) {
	if lr.pidDone != nil {
		defer close(lr.pidDone)
	}
	if delay {
		timer := time.NewTimer(pidRecordDelay)
		select {
		case <-lr.Finished:
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
func (t *Table[O]) enter(uid string, lr *Run[O]) (late bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs[uid] = lr
	t.changed.Broadcast()
	return t.closed
}

package v1alpha1_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

func c(t string, ok bool, reason string) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: reason}
}

// kstatusOf computes the health that Flux, Argo CD and kubectl-wait-style tools see.
func kstatusOf(t *testing.T, obj runtime.Object) kstatus.Status {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: m})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

func TestCommandPhaseAndHealth(t *testing.T) {
	admitted := c(wbv1.ConditionAdmitted, true, wbv1.ReasonAdmittedByProfile)
	started := c(wbv1.ConditionStarted, true, "Started")
	for _, tc := range []struct {
		name  string
		conds []metav1.Condition
		phase wbv1.CommandPhase
		final bool
		want  kstatus.Status
	}{
		{"new", nil, wbv1.CommandPending, false, kstatus.InProgressStatus},
		{"awaiting consent", []metav1.Condition{c(wbv1.ConditionAdmitted, false, wbv1.ReasonAwaitingConsent)}, wbv1.CommandAwaitingConsent, false, kstatus.InProgressStatus},
		{"admitted", []metav1.Condition{admitted}, wbv1.CommandPending, false, kstatus.InProgressStatus},
		{"running", []metav1.Condition{admitted, started}, wbv1.CommandRunning, false, kstatus.InProgressStatus},
		{"succeeded", []metav1.Condition{admitted, started, c(wbv1.ConditionCompleted, true, wbv1.ReasonSucceeded)}, wbv1.CommandSucceeded, true, kstatus.CurrentStatus},
		{"failed (interrupted by a node restart)", []metav1.Condition{admitted, started, c(wbv1.ConditionCompleted, true, wbv1.ReasonFailed)}, wbv1.CommandFailed, true, kstatus.FailedStatus},
		{"timed out", []metav1.Condition{admitted, started, c(wbv1.ConditionCompleted, true, wbv1.ReasonTimedOut)}, wbv1.CommandTimedOut, true, kstatus.FailedStatus},
		{"cancelled", []metav1.Condition{admitted, started, c(wbv1.ConditionCompleted, true, wbv1.ReasonCancelled)}, wbv1.CommandCancelled, true, kstatus.FailedStatus},
		{"refused at the gate", []metav1.Condition{c(wbv1.ConditionAdmitted, false, wbv1.ReasonRefused), c(wbv1.ConditionCompleted, true, wbv1.ReasonRefused)}, wbv1.CommandRefused, true, kstatus.FailedStatus},
		{"refused at the node", []metav1.Condition{admitted, c(wbv1.ConditionCompleted, true, wbv1.ReasonRefused)}, wbv1.CommandRefused, true, kstatus.FailedStatus},
		{"unknown outcome reason", []metav1.Condition{admitted, c(wbv1.ConditionCompleted, true, "Weird")}, wbv1.CommandFailed, true, kstatus.FailedStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			phase := wbv1.CommandPhaseFor(tc.conds)
			if phase != tc.phase || wbv1.CommandIsFinal(tc.conds) != tc.final {
				t.Fatalf("phase %s final %v, want %s %v", phase, wbv1.CommandIsFinal(tc.conds), tc.phase, tc.final)
			}
			cmd := &wbv1.TerminalCommand{TypeMeta: metav1.TypeMeta{Kind: "TerminalCommand", APIVersion: wbv1.GroupVersion.String()},
				ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: 1}}
			cmd.Status.Phase, cmd.Status.ObservedGeneration = phase, 1
			cmd.Status.Conditions = append(tc.conds, wbv1.HealthConditions(wbv1.CommandHealth(phase), string(phase), "", 1)...)
			if got := kstatusOf(t, cmd); got != tc.want {
				t.Fatalf("kstatus %s, want %s", got, tc.want)
			}
			// An unobserved generation is never Current.
			cmd.Generation = 2
			if got := kstatusOf(t, cmd); got != kstatus.InProgressStatus {
				t.Fatalf("kstatus with a new generation %s, want InProgress", got)
			}
		})
	}
}

func TestSessionHealth(t *testing.T) {
	for _, tc := range []struct {
		phase  wbv1.SessionPhase
		closed bool
		ready  *metav1.Condition
		want   kstatus.Status
		final  bool
	}{
		{wbv1.SessionRequested, false, nil, kstatus.InProgressStatus, false},
		{wbv1.SessionStarting, false, nil, kstatus.InProgressStatus, false},
		{wbv1.SessionRunning, false, &metav1.Condition{Type: wbv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Running"}, kstatus.CurrentStatus, false},
		{wbv1.SessionIdle, false, &metav1.Condition{Type: wbv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Running"}, kstatus.CurrentStatus, false},
		{wbv1.SessionClosed, true, nil, kstatus.CurrentStatus, true},
		{wbv1.SessionClosed, false, &metav1.Condition{Type: wbv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Closed"}, kstatus.FailedStatus, true},
		{wbv1.SessionFailed, false, &metav1.Condition{Type: wbv1.ConditionReady, Status: metav1.ConditionFalse, Reason: wbv1.ReasonFailed}, kstatus.FailedStatus, true},
		{wbv1.SessionKilled, false, &metav1.Condition{Type: wbv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Killed"}, kstatus.FailedStatus, true},
		{wbv1.SessionExpired, false, &metav1.Condition{Type: wbv1.ConditionReady, Status: metav1.ConditionFalse, Reason: wbv1.ReasonExpired}, kstatus.FailedStatus, true},
	} {
		t.Run(string(tc.phase), func(t *testing.T) {
			if wbv1.SessionPhaseIsFinal(tc.phase) != tc.final {
				t.Fatalf("final %v, want %v", !tc.final, tc.final)
			}
			s := &wbv1.TerminalSession{TypeMeta: metav1.TypeMeta{Kind: "TerminalSession", APIVersion: wbv1.GroupVersion.String()},
				ObjectMeta: metav1.ObjectMeta{Name: "s", Generation: 1}}
			s.Status.Phase, s.Status.ObservedGeneration = tc.phase, 1
			if tc.ready != nil {
				s.Status.Conditions = append(s.Status.Conditions, *tc.ready)
			}
			s.Status.Conditions = append(s.Status.Conditions, wbv1.HealthConditions(wbv1.SessionHealth(tc.phase, tc.closed), string(tc.phase), "", 1)...)
			if got := kstatusOf(t, s); got != tc.want {
				t.Fatalf("kstatus %s, want %s", got, tc.want)
			}
		})
	}
}

func TestEnvironmentPhaseAndHealth(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conds    []metav1.Condition
		deleting bool
		phase    wbv1.EnvironmentPhase
		want     kstatus.Status
	}{
		{"new", nil, false, wbv1.EnvironmentAllocating, kstatus.InProgressStatus},
		{"unplaced", []metav1.Condition{c(wbv1.ConditionScheduled, false, wbv1.ReasonNoMatch)}, false, wbv1.EnvironmentAllocating, kstatus.InProgressStatus},
		{"allocating", []metav1.Condition{c(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced), c(wbv1.ConditionReady, false, "Allocating")}, false, wbv1.EnvironmentAllocating, kstatus.InProgressStatus},
		{"ready", []metav1.Condition{c(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced), c(wbv1.ConditionReady, true, "Ready")}, false, wbv1.EnvironmentReady, kstatus.CurrentStatus},
		{"failed", []metav1.Condition{c(wbv1.ConditionReady, false, wbv1.ReasonFailed)}, false, wbv1.EnvironmentFailed, kstatus.FailedStatus},
		// Paused as asked: not Ready and not failed. Reconciling and Stalled are both False
		// (nothing is in progress); kstatus then reads Ready=False as InProgress, never Failed.
		{"paused", []metav1.Condition{c(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced), c(wbv1.ConditionReady, false, wbv1.ReasonPaused)}, false, wbv1.EnvironmentPaused, kstatus.InProgressStatus},
		// A paused environment being deleted drains like any other.
		{"paused deleting", []metav1.Condition{c(wbv1.ConditionReady, false, wbv1.ReasonPaused)}, true, wbv1.EnvironmentDraining, kstatus.TerminatingStatus},
		// Expiry wins over a pause.
		{"paused expired", []metav1.Condition{c(wbv1.ConditionExpired, true, wbv1.ReasonExpired), c(wbv1.ConditionReady, false, wbv1.ReasonPaused)}, false, wbv1.EnvironmentExpired, kstatus.FailedStatus},
		{"expired", []metav1.Condition{c(wbv1.ConditionExpired, true, wbv1.ReasonExpired), c(wbv1.ConditionReady, false, wbv1.ReasonExpired)}, false, wbv1.EnvironmentExpired, kstatus.FailedStatus},
		{"draining", []metav1.Condition{c(wbv1.ConditionReady, false, wbv1.ReasonDraining)}, false, wbv1.EnvironmentDraining, kstatus.InProgressStatus},
		{"deleting", []metav1.Condition{c(wbv1.ConditionReady, false, wbv1.ReasonDraining)}, true, wbv1.EnvironmentDraining, kstatus.TerminatingStatus},
		{"torn down", []metav1.Condition{c(wbv1.ConditionReady, false, wbv1.ReasonClosed), c(wbv1.ConditionCleanupComplete, true, "TornDown")}, true, wbv1.EnvironmentClosed, kstatus.TerminatingStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			phase := wbv1.EnvironmentPhaseFor(tc.conds, tc.deleting)
			if phase != tc.phase {
				t.Fatalf("phase %s, want %s", phase, tc.phase)
			}
			e := &wbv1.Environment{TypeMeta: metav1.TypeMeta{Kind: "Environment", APIVersion: wbv1.GroupVersion.String()},
				ObjectMeta: metav1.ObjectMeta{Name: "e", Generation: 1}}
			if tc.deleting {
				e.DeletionTimestamp = &metav1.Time{Time: time.Unix(1700000000, 0)}
			}
			e.Status.Phase, e.Status.ObservedGeneration = phase, 1
			e.Status.Conditions = append(tc.conds, wbv1.HealthConditions(wbv1.EnvironmentHealth(phase), string(phase), "", 1)...)
			if got := kstatusOf(t, e); got != tc.want {
				t.Fatalf("kstatus %s, want %s", got, tc.want)
			}
		})
	}
}

// TestWithoutHealthConditionsKStatusMisreads pins the defect the health conditions fix: a
// failed command and a failed session, as written before, read Current and InProgress.
func TestWithoutHealthConditionsKStatusMisreads(t *testing.T) {
	cmd := &wbv1.TerminalCommand{TypeMeta: metav1.TypeMeta{Kind: "TerminalCommand", APIVersion: wbv1.GroupVersion.String()}}
	cmd.Status.Conditions = []metav1.Condition{c(wbv1.ConditionCompleted, true, wbv1.ReasonFailed)}
	if got := kstatusOf(t, cmd); got != kstatus.CurrentStatus {
		t.Fatalf("without health conditions a failed command reads %s", got)
	}
	s := &wbv1.TerminalSession{TypeMeta: metav1.TypeMeta{Kind: "TerminalSession", APIVersion: wbv1.GroupVersion.String()}}
	s.Status.Conditions = []metav1.Condition{c(wbv1.ConditionReady, false, wbv1.ReasonFailed)}
	if got := kstatusOf(t, s); got != kstatus.InProgressStatus {
		t.Fatalf("without health conditions a failed session reads %s", got)
	}
}

func TestOperationDerivations(t *testing.T) {
	completed := func(reason string) []metav1.Condition {
		return []metav1.Condition{c(wbv1.ConditionCompleted, true, reason)}
	}
	for _, tc := range []struct {
		conds []metav1.Condition
		want  wbv1.WaitConditionStatus
	}{
		{nil, wbv1.WaitPending},
		{[]metav1.Condition{c(wbv1.ConditionCompleted, false, "Pending")}, wbv1.WaitPending},
		{completed("Satisfied"), wbv1.WaitSatisfied},
		{completed("TimedOut"), wbv1.WaitTimedOut},
		{completed("Cancelled"), wbv1.WaitCancelled},
		{completed("Expired"), wbv1.WaitExpired},
		{completed("Weird"), wbv1.WaitFailed},
	} {
		if got := wbv1.WaitStatusFor(tc.conds); got != tc.want || wbv1.WaitIsFinal(got) != (tc.want != wbv1.WaitPending) {
			t.Errorf("wait %v: %s, want %s", tc.conds, got, tc.want)
		}
	}
	for _, tc := range []struct {
		conds []metav1.Condition
		want  wbv1.ProbeResult
	}{
		{nil, wbv1.ProbePending}, {completed("Pass"), wbv1.ProbePass}, {completed("Fail"), wbv1.ProbeFail},
		{completed("Error"), wbv1.ProbeError}, {completed("Weird"), wbv1.ProbeError},
	} {
		if got := wbv1.ProbeResultFor(tc.conds); got != tc.want || wbv1.ProbeIsFinal(got) != (tc.want != wbv1.ProbePending) {
			t.Errorf("probe %v: %s, want %s", tc.conds, got, tc.want)
		}
	}
	for _, tc := range []struct {
		conds []metav1.Condition
		want  wbv1.FilePatchPhase
	}{
		{nil, wbv1.FilePatchAwaitingApproval},
		{[]metav1.Condition{c(wbv1.ConditionApplied, false, wbv1.ReasonAwaitingApproval)}, wbv1.FilePatchAwaitingApproval},
		{[]metav1.Condition{c(wbv1.ConditionApplied, true, "Applied")}, wbv1.FilePatchApplied},
		{[]metav1.Condition{c(wbv1.ConditionApplied, false, "ApprovalRejected")}, wbv1.FilePatchRejected},
		{[]metav1.Condition{{Type: wbv1.ConditionApplied, Status: metav1.ConditionUnknown, Reason: "Interrupted"}}, wbv1.FilePatchRejected},
	} {
		if got := wbv1.FilePatchPhaseFor(tc.conds); got != tc.want || wbv1.FilePatchIsFinal(got) != (tc.want != wbv1.FilePatchAwaitingApproval) {
			t.Errorf("patch %v: %s, want %s", tc.conds, got, tc.want)
		}
	}
	for p, final := range map[wbv1.CommandPhase]bool{wbv1.CommandPending: false, wbv1.CommandAwaitingConsent: false, wbv1.CommandRunning: false,
		wbv1.CommandSucceeded: true, wbv1.CommandFailed: true, wbv1.CommandTimedOut: true, wbv1.CommandCancelled: true, wbv1.CommandRefused: true} {
		if wbv1.CommandPhaseIsFinal(p) != final {
			t.Errorf("command phase %s final = %v", p, !final)
		}
	}
}

// kstatusCase is an object as its writer records it and the health kstatus must read.
type kstatusCase struct {
	name string
	obj  func() runtime.Object
	want kstatus.Status
}

// derivedRow is one outcome of a kind whose status field derives from its conditions
// alone; name "" names the case by the derived value.
type derivedRow struct {
	name  string
	conds []metav1.Condition
	want  kstatus.Status
}

// derivedCases makes one case per row: obj builds the object from the value derive reads
// off the row's conditions and the conditions it records (the row's plus the health ones
// of that value at generation 2).
func derivedCases[S ~string](kind string, rows []derivedRow, derive func([]metav1.Condition) S, health func(S) wbv1.Health,
	obj func(S, []metav1.Condition) runtime.Object) []kstatusCase {
	out := make([]kstatusCase, 0, len(rows))
	for _, r := range rows {
		s, name := derive(r.conds), r.name
		if name == "" {
			name = string(s)
		}
		out = append(out, kstatusCase{kind + " " + name, func() runtime.Object {
			return obj(s, append(r.conds, wbv1.HealthConditions(health(s), string(s), "", 2)...))
		}, r.want})
	}
	return out
}

// TestOperationHealthThroughKStatus: every outcome of a Wait, Probe, FilePatch,
// ConsentRequest and ConsentGrant, as its writer records it (the derived field, the
// deciding condition, the health conditions, observedGeneration), read by kstatus itself:
// pending work is InProgress, what the spec asked for is Current, any other final outcome
// is Failed — never Current.
func TestOperationHealthThroughKStatus(t *testing.T) {
	tm := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{Kind: kind, APIVersion: wbv1.GroupVersion.String()}
	}
	om := metav1.ObjectMeta{Name: "x", Generation: 2}
	completed := func(reason string) []metav1.Condition {
		return []metav1.Condition{c(wbv1.ConditionCompleted, true, reason)}
	}
	type row = derivedRow
	ap, dc := wbv1.ConditionApplied, wbv1.ConditionDecided
	var cases []kstatusCase
	cases = append(cases, derivedCases("wait", []row{
		{"", nil, kstatus.InProgressStatus},
		{"", completed("Satisfied"), kstatus.CurrentStatus},
		{"", completed("Cancelled"), kstatus.CurrentStatus},
		{"", completed("TimedOut"), kstatus.FailedStatus},
		{"", completed("Failed"), kstatus.FailedStatus},
		{"", completed("Expired"), kstatus.FailedStatus},
	}, wbv1.WaitStatusFor, wbv1.WaitHealth, func(s wbv1.WaitConditionStatus, conds []metav1.Condition) runtime.Object {
		w := &wbv1.Wait{TypeMeta: tm("Wait"), ObjectMeta: om}
		w.Status.ConditionStatus, w.Status.ObservedGeneration, w.Status.Conditions = s, 2, conds
		return w
	})...)
	cases = append(cases, derivedCases("probe", []row{
		{"", nil, kstatus.InProgressStatus},
		{"", completed("Pass"), kstatus.CurrentStatus},
		{"", completed("Fail"), kstatus.FailedStatus},
		{"", completed("Error"), kstatus.FailedStatus},
	}, wbv1.ProbeResultFor, wbv1.ProbeHealth, func(r wbv1.ProbeResult, conds []metav1.Condition) runtime.Object {
		p := &wbv1.Probe{TypeMeta: tm("Probe"), ObjectMeta: om}
		p.Status.Result, p.Status.ObservedGeneration, p.Status.Conditions = r, 2, conds
		return p
	})...)
	cases = append(cases, derivedCases("filepatch", []row{
		{"new", nil, kstatus.InProgressStatus},
		{"awaiting approval", []metav1.Condition{c(ap, false, wbv1.ReasonAwaitingApproval)}, kstatus.InProgressStatus},
		{"applied", []metav1.Condition{c(ap, true, "Applied")}, kstatus.CurrentStatus},
		{"refused", []metav1.Condition{c(ap, false, wbv1.ReasonRefused)}, kstatus.FailedStatus},
		{"outcome unknown", []metav1.Condition{{Type: ap, Status: metav1.ConditionUnknown, Reason: "Interrupted"}}, kstatus.FailedStatus},
	}, wbv1.FilePatchPhaseFor, wbv1.FilePatchHealth, func(ph wbv1.FilePatchPhase, conds []metav1.Condition) runtime.Object {
		fp := &wbv1.FilePatch{TypeMeta: tm("FilePatch"), ObjectMeta: om}
		fp.Status.Phase, fp.Status.ObservedGeneration, fp.Status.Conditions = ph, 2, conds
		return fp
	})...)
	cases = append(cases, derivedCases("consentrequest", []row{
		{"Pending 0", nil, kstatus.InProgressStatus},
		{"Pending 1", []metav1.Condition{c(dc, false, "Pending")}, kstatus.InProgressStatus},
		{"Granted 1", []metav1.Condition{c(dc, true, "Granted")}, kstatus.CurrentStatus},
		{"Denied 1", []metav1.Condition{c(dc, true, "Denied")}, kstatus.CurrentStatus},
		{"Revoked 1", []metav1.Condition{c(dc, true, "Revoked")}, kstatus.CurrentStatus},
		{"Expired 1", []metav1.Condition{c(dc, true, "Expired")}, kstatus.FailedStatus},
	}, wbv1.ConsentDecisionFor, wbv1.ConsentRequestHealth, func(d wbv1.ConsentDecision, conds []metav1.Condition) runtime.Object {
		cr := &wbv1.ConsentRequest{TypeMeta: tm("ConsentRequest"), ObjectMeta: om}
		cr.Status.Decision, cr.Status.ObservedGeneration, cr.Status.Conditions = d, 2, conds
		return cr
	})...)
	for _, tc := range []struct {
		name           string
		state          wbv1.ConsentGrantState
		active, asKept bool
		want           kstatus.Status
	}{
		{"active", wbv1.ConsentGrantActive, true, false, kstatus.CurrentStatus},
		{"consumed", wbv1.ConsentGrantConsumed, false, true, kstatus.CurrentStatus},
		{"denied", wbv1.ConsentGrantDenied, false, true, kstatus.CurrentStatus},
		{"revoked", wbv1.ConsentGrantRevoked, false, true, kstatus.CurrentStatus},
		{"expired", wbv1.ConsentGrantExpired, false, false, kstatus.FailedStatus},
		{"unbound", wbv1.ConsentGrantUnbound, false, false, kstatus.FailedStatus},
	} {
		cases = append(cases, kstatusCase{"consentgrant " + tc.name, func() runtime.Object {
			g := &wbv1.ConsentGrant{TypeMeta: tm("ConsentGrant"), ObjectMeta: om}
			g.Status.State, g.Status.ObservedGeneration = tc.state, 2
			g.Status.Conditions = append([]metav1.Condition{c(wbv1.ConditionActive, tc.active, "R")},
				wbv1.HealthConditions(wbv1.ConsentGrantHealth(tc.active, tc.asKept), "R", "", 2)...)
			return g
		}, tc.want})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := kstatusOf(t, tc.obj()); got != tc.want {
				t.Fatalf("kstatus %s, want %s", got, tc.want)
			}
		})
	}
	// observedGeneration behind the generation is InProgress whatever the conditions say.
	w := &wbv1.Wait{TypeMeta: tm("Wait"), ObjectMeta: om}
	w.Status.ObservedGeneration = 1
	w.Status.Conditions = append(completed("Satisfied"), wbv1.HealthConditions(wbv1.HealthCurrent, "Satisfied", "", 1)...)
	if got := kstatusOf(t, w); got != kstatus.InProgressStatus {
		t.Fatalf("a wait observed at an old generation reads %s", got)
	}
}

// The phase of a command has one writer for its whole life: the component that decided it
// (status.decidedBy), whatever the conditions say — a command the manager admitted after
// consent keeps the manager as the writer of its phase when the node runs it; one the node
// took keeps the node when it is refused, cancelled or succeeds.
func TestCommandPhaseWriterIsTheDecider(t *testing.T) {
	admitted := c(wbv1.ConditionAdmitted, true, wbv1.ReasonAdmittedByProfile)
	started, ok := c(wbv1.ConditionStarted, true, "Started"), c(wbv1.ConditionCompleted, true, wbv1.ReasonSucceeded)
	refused := []metav1.Condition{c(wbv1.ConditionAdmitted, false, wbv1.ReasonRefused), c(wbv1.ConditionCompleted, true, wbv1.ReasonRefused)}
	for _, tc := range []struct {
		name    string
		decided wbv1.PhaseWriter
		conds   []metav1.Condition
		want    wbv1.PhaseWriter
	}{
		{"new", "", nil, wbv1.PhaseWriterManager},
		{"awaiting consent", wbv1.PhaseWriterManager, []metav1.Condition{c(wbv1.ConditionAdmitted, false, wbv1.ReasonAwaitingConsent)}, wbv1.PhaseWriterManager},
		{"admitted by the gate, not started", wbv1.PhaseWriterManager, []metav1.Condition{admitted}, wbv1.PhaseWriterManager},
		{"admitted by the gate, running", wbv1.PhaseWriterManager, []metav1.Condition{admitted, started}, wbv1.PhaseWriterManager},
		{"admitted by the gate, succeeded at the node", wbv1.PhaseWriterManager, []metav1.Condition{admitted, started, ok}, wbv1.PhaseWriterManager},
		{"refused at the gate", wbv1.PhaseWriterManager, refused, wbv1.PhaseWriterManager},
		{"cancelled before admission", wbv1.PhaseWriterManager, []metav1.Condition{c(wbv1.ConditionAdmitted, false, wbv1.ReasonCancelled), c(wbv1.ConditionCompleted, true, wbv1.ReasonCancelled)}, wbv1.PhaseWriterManager},
		{"claimed by the node (fast path)", wbv1.PhaseWriterNode, []metav1.Condition{admitted, c(wbv1.ConditionStarted, false, "StartingAtNode")}, wbv1.PhaseWriterNode},
		{"taken by the node, running", wbv1.PhaseWriterNode, []metav1.Condition{admitted, started}, wbv1.PhaseWriterNode},
		{"taken by the node, refused there (argv-not-admitted)", wbv1.PhaseWriterNode, []metav1.Condition{admitted, c(wbv1.ConditionCompleted, true, wbv1.ReasonRefused)}, wbv1.PhaseWriterNode},
		{"taken by the node, succeeded", wbv1.PhaseWriterNode, []metav1.Condition{admitted, started, ok}, wbv1.PhaseWriterNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := wbv1.TerminalCommandStatus{NodeName: "n1", DecidedBy: tc.decided, Conditions: tc.conds}
			if got := wbv1.CommandPhaseWriter(&st); got != tc.want {
				t.Fatalf("writer %s, want %s", got, tc.want)
			}
		})
	}
}

// TestEnvironmentPhaseWriterHandOff pins who writes an Environment's phase: the manager,
// unless the status (as a write leaves it) records an adopted pool member — then the node,
// whatever the conditions say, for the rest of the object's life.
func TestEnvironmentPhaseWriterHandOff(t *testing.T) {
	member := &wbv1.PoolMemberStatus{Name: "pool-abcde", UID: "0b7f0c2e-7d4e-4c4b-9a53-1f1e2d3c4b5a", SourceGeneration: 1}
	for _, tc := range []struct {
		name   string
		status wbv1.EnvironmentStatus
		want   wbv1.PhaseWriter
	}{
		{"new", wbv1.EnvironmentStatus{}, wbv1.PhaseWriterManager},
		{"placed, allocating", wbv1.EnvironmentStatus{NodeName: "n1", Conditions: []metav1.Condition{c(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced)}}, wbv1.PhaseWriterManager},
		{"ready, ordinary", wbv1.EnvironmentStatus{NodeName: "n1", Conditions: []metav1.Condition{c(wbv1.ConditionReady, true, "Ready")}}, wbv1.PhaseWriterManager},
		{"pool claimer refused pool-not-found", wbv1.EnvironmentStatus{Conditions: []metav1.Condition{c(wbv1.ConditionScheduled, false, wbv1.ReasonNoMatch)}}, wbv1.PhaseWriterManager},
		{"pool claimer bound, node not yet acted", wbv1.EnvironmentStatus{NodeName: "n1", PoolMember: member, Conditions: []metav1.Condition{c(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced)}}, wbv1.PhaseWriterNode},
		{"pool claimer bound beside a claim it lost (the member is another's)", wbv1.EnvironmentStatus{NodeName: "n1", PoolMember: member, Conditions: []metav1.Condition{c(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced)}}, wbv1.PhaseWriterNode},
		{"pool claimer whose lost claim left no member: poolMember names itself, allocated afresh", wbv1.EnvironmentStatus{NodeName: "n1", PoolMember: &wbv1.PoolMemberStatus{Name: "me", UID: "5d1c0e2e-0000-4c4b-9a53-1f1e2d3c4b5a"}, Conditions: []metav1.Condition{c(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced)}}, wbv1.PhaseWriterNode},
		{"pool claimer ready", wbv1.EnvironmentStatus{NodeName: "n1", PoolMember: member, Conditions: []metav1.Condition{c(wbv1.ConditionReady, true, "Ready")}}, wbv1.PhaseWriterNode},
		{"pool claimer expired by the manager", wbv1.EnvironmentStatus{NodeName: "n1", PoolMember: member, Conditions: []metav1.Condition{c(wbv1.ConditionExpired, true, wbv1.ReasonExpired), c(wbv1.ConditionReady, true, "Ready")}}, wbv1.PhaseWriterNode},
		{"pool claimer torn down", wbv1.EnvironmentStatus{NodeName: "n1", PoolMember: member, Conditions: []metav1.Condition{c(wbv1.ConditionReady, false, wbv1.ReasonClosed), c(wbv1.ConditionCleanupComplete, true, "TornDown")}}, wbv1.PhaseWriterNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := wbv1.EnvironmentPhaseWriter(&tc.status); got != tc.want {
				t.Fatalf("writer %s, want %s", got, tc.want)
			}
		})
	}
}

// TestEnvironmentAwaitsNode: the manager carries Reconciling=True for a pool claimer only
// until its node's first write (a Ready condition of any status).
func TestEnvironmentAwaitsNode(t *testing.T) {
	member := &wbv1.PoolMemberStatus{Name: "pool-abcde", UID: "0b7f0c2e-7d4e-4c4b-9a53-1f1e2d3c4b5a"}
	for _, tc := range []struct {
		name   string
		status wbv1.EnvironmentStatus
		want   bool
	}{
		{"ordinary, placed", wbv1.EnvironmentStatus{NodeName: "n1", Conditions: []metav1.Condition{c(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced)}}, false},
		{"claimer bound, node not yet written", wbv1.EnvironmentStatus{NodeName: "n1", PoolMember: member, Conditions: []metav1.Condition{c(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced)}}, true},
		{"claimer bound, manager's Reconciling set", wbv1.EnvironmentStatus{NodeName: "n1", PoolMember: member, Conditions: []metav1.Condition{c(wbv1.ConditionScheduled, true, wbv1.ReasonPlaced), c(wbv1.ConditionReconciling, true, "Allocating")}}, true},
		{"claimer Ready", wbv1.EnvironmentStatus{NodeName: "n1", PoolMember: member, Conditions: []metav1.Condition{c(wbv1.ConditionReady, true, "Ready")}}, false},
		{"claimer failed on its node", wbv1.EnvironmentStatus{NodeName: "n1", PoolMember: member, Conditions: []metav1.Condition{c(wbv1.ConditionReady, false, wbv1.ReasonFailed)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := wbv1.EnvironmentAwaitsNode(&tc.status); got != tc.want {
				t.Fatalf("EnvironmentAwaitsNode = %v, want %v", got, tc.want)
			}
		})
	}
}

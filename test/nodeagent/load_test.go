package nodeagent

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/kstate"
)

// TestLoad puts many sessions and commands on one node agent process whose caps are raised
// by configuration, and checks: no lost outcome (every command ends in exactly one),
// overload is refused with its code (sessions above the cap: session-cap-reached; commands
// above the concurrency cap wait for a slot, bounded, then command-cap-reached) and never
// queued without bound, and the
// agent's memory (live heap from the Go runtime's GC trace, RSS) is reported before, under
// and after the load, with the time per command (p50, p99, from the create call to the
// outcome seen on a watch) and the throughput.
//
// CI-sized by default (WB_LOAD_SESSIONS=10, WB_LOAD_COMMANDS=150, a burst); `make load` runs
// the full size, WB_LOAD_SESSIONS=200 WB_LOAD_COMMANDS=10000, paced by WB_LOAD_RATE.
func TestLoad(t *testing.T) {
	const node = "node-load"
	sessions, commands := envInt("WB_LOAD_SESSIONS", 10), envInt("WB_LOAD_COMMANDS", 150)
	ctx := context.Background()
	na := newAgentNode(t, node, "load", fmt.Sprintf(
		"recordRetentionSeconds: 2\ncaps:\n  sessions: %d\n  sessionsPerEnvironment: %d\n  concurrentCommands: %d\n  eventBufferDepth: 200\n",
		sessions, sessions, envInt("WB_LOAD_CONCURRENT", 8)))
	root := na.root
	p := na.start(t, "GODEBUG=gctrace=1") // the runtime reports the agent's heap at every collection
	defer p.Stop()
	ns := namespace(t)
	// Every session outlives the run: the node's ceiling (12 h) instead of the 1 h default,
	// so a full-size run's commands never meet a session closed by its maximum duration.
	const sessionSeconds = 43200
	must(t, env.Client.Create(ctx, hostEnvironment(ns, "e", root, node)))
	must(t, env.Client.Create(ctx, session(ns, "s", "e", func(s *wbv1.TerminalSessionSpec) { s.MaxDurationSeconds = sessionSeconds })))
	eventually(t, 60*time.Second, "environment Ready and session Running", func() (bool, string) {
		return kstate.ReadyAndRunning(t, env.Client, ns, "e", "s", nil)
	})
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", nil, []string{"load-"})))
	rssBefore := rssKiB(p.Cmd.Process.Pid)

	// Sessions up to the cap open ("s" and s1..), the two above it are refused with the cap's
	// code: at admission when the node's published free capacity already says so (429),
	// else by the node.
	admissionRefused := 0
	for i := 1; i < sessions+2; i++ {
		err := env.Client.Create(ctx, session(ns, fmt.Sprintf("s%d", i), "e", func(s *wbv1.TerminalSessionSpec) { s.MaxDurationSeconds = sessionSeconds }))
		if apierrors.IsTooManyRequests(err) &&
			strings.Contains(err.Error(), string(actuation.CodeSessionCapReached)) {
			admissionRefused++
			continue
		}
		must(t, err)
	}
	open, refusedSessions := 0, 0
	var openNames []string // which sessions the node refused at its cap depends on the order it saw them
	eventually(t, 120*time.Second, "every session open or refused at the cap", func() (bool, string) {
		var list wbv1.TerminalSessionList
		must(t, env.Client.List(ctx, &list, client.InNamespace(ns)))
		open, refusedSessions, openNames = 0, 0, nil
		for _, s := range list.Items {
			switch {
			case s.Status.Phase == wbv1.SessionRunning:
				open++
				openNames = append(openNames, s.Name)
			case s.Status.Phase == wbv1.SessionFailed && s.Status.Refusal != nil && s.Status.Refusal.Code == string(actuation.CodeSessionCapReached):
				refusedSessions++
			}
		}
		refusedSessions += admissionRefused
		return open+refusedSessions == sessions+2, fmt.Sprintf("open %d refused %d (%d at admission) of %d", open, refusedSessions, admissionRefused, sessions+2)
	})
	if open != sessions || refusedSessions != 2 {
		t.Fatalf("sessions: %d open (cap %d), %d refused", open, sessions, refusedSessions)
	}

	// Every command's end is seen on a watch (no polling of 10,000 objects): its time from
	// the create call to the first event showing its one outcome is its time per command.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	tracker := newOutcomeTracker()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go tracker.follow(watchCtx, t, wc, ns)
	<-tracker.ready
	heapBefore := lastLiveHeapMB(p.Log.String())

	// WB_LOAD_RATE (commands/s) paces the creates, a steady load such as agents running a
	// command every few seconds; unset, every command is created as fast as the API server
	// takes it (a burst). A paced run reports how far the creates fell behind their schedule.
	rate := envInt("WB_LOAD_RATE", 0)
	start := time.Now()
	created := make(map[string]time.Time, commands)
	var behind time.Duration
	for i := 0; i < commands; i++ {
		if rate > 0 {
			due := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
			if wait := time.Until(due); wait > 0 {
				time.Sleep(wait)
			} else {
				behind = max(behind, -wait)
			}
		}
		c := command(ns, fmt.Sprintf("c%d", i), "/bin/echo", fmt.Sprintf("load-%d", i))
		c.Spec.SessionRef = wbv1.ObjectName(openNames[i%len(openNames)])
		created[c.Name] = time.Now()
		must(t, env.Client.Create(ctx, c))
	}
	createdIn := time.Since(start)
	pacing := "a burst (as fast as the API server takes them)"
	if rate > 0 {
		pacing = fmt.Sprintf("paced at %d/s (creates at most %s behind their schedule)", rate, behind.Round(time.Millisecond))
	}
	var rssPeak int64
	progress := time.Now()
	eventually(t, time.Duration(commands)*400*time.Millisecond+60*time.Second, "every command's one outcome", func() (bool, string) {
		rssPeak = max(rssPeak, rssKiB(p.Cmd.Process.Pid))
		n, outcomes := tracker.summary()
		if time.Since(progress) >= time.Minute { // a long run reports as it goes
			progress = time.Now()
			t.Logf("load progress at %s: %d of %d final %v; agent live heap %d MB (peak %d MB), RSS %d KiB",
				time.Since(start).Round(time.Second), n, commands, outcomes, lastLiveHeapMB(p.Log.String()), maxLiveHeapMB(p.Log.String()), rssKiB(p.Cmd.Process.Pid))
		}
		return n == commands, fmt.Sprintf("%d of %d final: %v", n, commands, outcomes)
	})
	ended := tracker.lastSeen()
	_, outcomes := tracker.summary()
	stopWatch()
	elapsed := ended.Sub(start)
	// Every command is final: list them once (paged) and check the outcomes the API holds.
	final := 0
	for cont := ""; ; {
		var list wbv1.TerminalCommandList
		must(t, env.Client.List(ctx, &list, client.InNamespace(ns), client.Limit(500), client.Continue(cont)))
		for _, c := range list.Items {
			if wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions) {
				final++
			}
		}
		if cont = list.Continue; cont == "" {
			break
		}
	}
	if final != commands {
		t.Errorf("%d of %d commands hold their one outcome in the API server", final, commands)
	}
	for k, n := range outcomes {
		if k != string(wbv1.CommandSucceeded) && k != string(wbv1.CommandRefused)+"/"+string(actuation.CodeCommandCapReached) {
			t.Errorf("%d commands ended %s: only success or the concurrency cap's refusal are expected", n, k)
		}
	}
	lat := tracker.latencies(created)
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	heapPeak := maxLiveHeapMB(p.Log.String())
	rssAfter := rssKiB(p.Cmd.Process.Pid)
	heapAfter := "not measured (CI size)"
	if commands >= 1000 {
		// The Go runtime forces a collection at least every 2 minutes: the next one after the
		// work shows the heap the agent keeps once it is done.
		from := len(p.Log.String())
		eventually(t, 150*time.Second, "a collection of the agent after the work", func() (bool, string) {
			return lastLiveHeapMB(p.Log.String()[from:]) >= 0, "no gc yet"
		})
		heapAfter = fmt.Sprintf("%d MB", lastLiveHeapMB(p.Log.String()[from:]))
		rssAfter = rssKiB(p.Cmd.Process.Pid)
	}
	t.Logf("load: %d sessions (+2 refused at the cap), %d commands created %s in %s, all final %s after the first create; "+
		"throughput %.1f commands/s; time per command (create → outcome seen) p50 %s p99 %s; outcomes %v; "+
		"agent live heap (after GC) %d MB before, %d MB peak, after: %s; agent RSS %d KiB before, %d KiB peak, %d KiB after",
		sessions, commands, pacing, createdIn.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(commands)/elapsed.Seconds(),
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), outcomes, heapBefore, heapPeak, heapAfter, rssBefore, rssPeak, rssAfter)
	for _, st := range tracker.stepLatencies(created) {
		t.Logf("load step %-18s p50 %10s p99 %10s (%d commands)", st.name, percentile(st.d, 0.50).Round(time.Millisecond), percentile(st.d, 0.99).Round(time.Millisecond), len(st.d))
	}
}

// outcomeTracker records when a watch first shows each command with its one outcome.
type outcomeTracker struct {
	mu       sync.Mutex
	ready    chan struct{}
	final    map[string]time.Time
	outcomes map[string]int
	last     time.Time
	// steps: when the watch first showed each command admitted, started, with its outcome
	// in the conditions (final), and observed (final is final above: the outcome with the
	// phase a user reads agreeing).
	admitted, started, outcome map[string]time.Time
}

func newOutcomeTracker() *outcomeTracker {
	return &outcomeTracker{ready: make(chan struct{}), final: map[string]time.Time{}, outcomes: map[string]int{},
		admitted: map[string]time.Time{}, started: map[string]time.Time{}, outcome: map[string]time.Time{}}
}

func (o *outcomeTracker) see(c *wbv1.TerminalCommand, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	first := func(m map[string]time.Time, cond bool) {
		if _, seen := m[c.Name]; cond && !seen {
			m[c.Name] = at
		}
	}
	first(o.admitted, condTrue(c, wbv1.ConditionAdmitted))
	first(o.started, condTrue(c, wbv1.ConditionStarted))
	first(o.outcome, wbv1.CommandIsFinal(c.Status.Conditions))
	if !wbv1.CommandIsFinal(c.Status.Conditions) || c.Status.Phase != wbv1.CommandPhaseFor(c.Status.Conditions) {
		return
	}
	if _, seen := o.final[c.Name]; seen {
		return
	}
	o.final[c.Name], o.last = at, at
	k := string(c.Status.Phase)
	if c.Status.Refusal != nil {
		k += "/" + c.Status.Refusal.Code
	}
	o.outcomes[k]++
}

// follow watches the namespace's commands until ctx ends; a closed watch is resumed from
// the last version seen, or after a paged list when that version is gone.
func (o *outcomeTracker) follow(ctx context.Context, t *testing.T, wc client.WithWatch, ns string) {
	rv, once := "", false
	for ctx.Err() == nil {
		if rv == "" {
			var list wbv1.TerminalCommandList
			if err := wc.List(ctx, &list, client.InNamespace(ns)); err != nil {
				time.Sleep(100 * time.Millisecond) // a failed list is retried (bounded by ctx)
				continue
			}
			for i := range list.Items {
				o.see(&list.Items[i], time.Now())
			}
			rv = list.ResourceVersion
		}
		w, err := wc.Watch(ctx, &wbv1.TerminalCommandList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			rv = ""
			continue
		}
		if !once {
			once = true
			close(o.ready)
		}
		for ev := range w.ResultChan() {
			now := time.Now()
			c, ok := ev.Object.(*wbv1.TerminalCommand)
			if !ok {
				rv = "" // an error event (e.g. the version is too old): list again
				break
			}
			rv = c.ResourceVersion
			o.see(c, now)
		}
		w.Stop()
	}
	if !once {
		close(o.ready)
	}
}

func (o *outcomeTracker) summary() (int, map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]int, len(o.outcomes))
	for k, v := range o.outcomes {
		out[k] = v
	}
	return len(o.final), out
}

func (o *outcomeTracker) lastSeen() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

func condTrue(c *wbv1.TerminalCommand, t string) bool {
	for _, cd := range c.Status.Conditions {
		if cd.Type == t && cd.Status == metav1.ConditionTrue {
			return true
		}
	}
	return false
}

// stepLatencies are, per step of a command's path as the watch showed it, the sorted
// durations over the commands that passed through both ends of the step: create →
// admitted, admitted → started, started → outcome (final conditions), outcome → observed
// (the phase a user reads agrees with the outcome). A refused command has no start: it
// counts in create → admitted only when it was admitted first. Steps that arrive in one
// write measure 0.
type loadStep struct {
	name string
	d    []time.Duration
}

func (o *outcomeTracker) stepLatencies(created map[string]time.Time) []loadStep {
	o.mu.Lock()
	defer o.mu.Unlock()
	span := func(from func(string) (time.Time, bool), to map[string]time.Time) []time.Duration {
		var out []time.Duration
		for name, end := range to {
			if start, ok := from(name); ok {
				out = append(out, max(0, end.Sub(start)))
			}
		}
		slices.Sort(out)
		return out
	}
	in := func(m map[string]time.Time) func(string) (time.Time, bool) {
		return func(n string) (time.Time, bool) { t, ok := m[n]; return t, ok }
	}
	return []loadStep{
		{"create→admitted", span(in(created), o.admitted)},
		{"admitted→started", span(in(o.admitted), o.started)},
		{"started→outcome", span(in(o.started), o.outcome)},
		{"outcome→observed", span(in(o.outcome), o.final)},
	}
}

// latencies are the times from each command's create call to its outcome on the watch.
func (o *outcomeTracker) latencies(created map[string]time.Time) []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]time.Duration, 0, len(o.final))
	for name, at := range o.final {
		if c, ok := created[name]; ok {
			out = append(out, at.Sub(c))
		}
	}
	slices.Sort(out)
	return out
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// gcTrace matches the heap figures of a GODEBUG=gctrace=1 line: heap at GC start, at GC
// end, and live heap (MB).
var gcTrace = regexp.MustCompile(`(?m)^gc \d+ @.* (\d+)->(\d+)->(\d+) MB`)

// lastLiveHeapMB is the live heap after the last collection the trace shows (-1: none).
func lastLiveHeapMB(log string) int {
	m := gcTrace.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return -1
	}
	n, _ := strconv.Atoi(m[len(m)-1][3])
	return n
}

// maxLiveHeapMB is the largest live heap after any collection the trace shows.
func maxLiveHeapMB(log string) int {
	peak := -1
	for _, m := range gcTrace.FindAllStringSubmatch(log, -1) {
		if n, _ := strconv.Atoi(m[3]); n > peak {
			peak = n
		}
	}
	return peak
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// rssKiB reads a process's resident set size (0 when it cannot be read).
func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

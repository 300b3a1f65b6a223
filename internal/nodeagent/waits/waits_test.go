package waits

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/test/testkit"
)

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper() // sessions start through the sandbox helper (this binary)
	// As in the session tests: orphans of a killed group are re-parented to
	// the test binary so sessions can confirm their cleanup.
	if err := procexec.EnableSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "EnableSubreaper:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

const testTimeout = 10 * time.Second

var must = testkit.Must

func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	if got := string(actuation.CodeOf(err)); got != code {
		t.Fatalf("code = %q (err: %v), want %q", got, err, code)
	}
}

func newManager(t testing.TB) *session.Manager {
	t.Helper()
	m := session.NewManager(session.Caps{Sessions: 8, SessionsPerEnvironment: 8, ReaderTasks: 16})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("session shutdown: %v", err)
		}
	})
	return m
}

var sessionSeq atomic.Int64

func open(t testing.TB, m *session.Manager, argv ...string) *session.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	s, err := m.Open(ctx, session.Spec{
		ID:            fmt.Sprintf("s-%d", sessionSeq.Add(1)),
		EnvironmentID: "env",
		Argv:          argv,
		Env:           []string{"PATH=/usr/bin:/bin"},
		IdleTimeout:   -1,
	})
	if err != nil {
		t.Fatalf("open %q: %v", argv, err)
	}
	return s
}

func newEngine(t testing.TB, c Caps) *Engine {
	t.Helper()
	e := NewEngine(c)
	t.Cleanup(e.Close)
	return e
}

// result waits (bounded) for the wait's single outcome.
func result(t testing.TB, h *Handle) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r, err := h.Wait(ctx)
	if err != nil {
		t.Fatalf("wait %s did not end within %s", h.ID(), testTimeout)
	}
	return r
}

func deadline(d time.Duration) time.Time { return time.Now().Add(d) }

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestOutputMatchesThroughEscapes(t *testing.T) {
	m := newManager(t)
	e := newEngine(t, Caps{})
	s := open(t, m, "/bin/sh", "-c", `read x; printf 'build: \033[1mOK\033[0m done\n'; exec cat`)
	h, err := e.Register(context.Background(), Request{
		ID: "w-match", Kind: KindOutputMatches, Deadline: deadline(testTimeout),
		Pattern: regexp.MustCompile(`build: OK done`), Source: SessionSource(s), SinceSeq: s.Events().LastSeq(),
	})
	must(t, err)
	// The engine evaluates the wait once registered; wait for that first evaluation (no
	// output yet: it must be pending) instead of a fixed window, which a loaded machine misses.
	var obs Observation
	for until, n := time.Now().Add(testTimeout), 0; n == 0; {
		select {
		case <-h.Done():
			t.Fatalf("satisfied before any output: %+v", result(t, h))
		default:
		}
		if obs, n = h.Last(); n == 0 {
			if time.Now().After(until) {
				t.Fatalf("no evaluation of the wait within %s", testTimeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if obs.Satisfied {
		t.Fatalf("pending observation %+v", obs)
	}
	must(t, s.Input([]byte("go\n")))
	r := result(t, h)
	if r.Status != StatusSatisfied || r.Observation.SeqFrom == 0 || r.Observation.SeqTo < r.Observation.SeqFrom {
		t.Fatalf("result %+v", r)
	}
	if !alive(s.Info().Pid) {
		t.Fatal("the session process died")
	}
	if _, ok := e.Get("w-match"); ok || e.Pending() != 0 {
		t.Fatal("finished wait still pending")
	}
}

func TestOutputSince(t *testing.T) {
	m := newManager(t)
	e := newEngine(t, Caps{})
	s := open(t, m, "/bin/cat")
	since := s.Events().LastSeq()
	h, err := e.Register(context.Background(), Request{ID: "w-since", Kind: KindOutputSince, Deadline: deadline(testTimeout), SinceSeq: since, Source: SessionSource(s)})
	must(t, err)
	select {
	case <-h.Done():
		t.Fatalf("satisfied without output: %+v", result(t, h))
	case <-time.After(100 * time.Millisecond):
	}
	must(t, s.Input([]byte("x\n")))
	r := result(t, h)
	if r.Status != StatusSatisfied || r.Observation.SeqFrom <= since {
		t.Fatalf("result %+v (since %d)", r, since)
	}
	// Registering again with the same ID after the end starts a new wait,
	// now satisfied at once.
	h2, err := e.Register(context.Background(), Request{ID: "w-since", Kind: KindOutputSince, Deadline: deadline(testTimeout), SinceSeq: since, Source: SessionSource(s)})
	must(t, err)
	if r := result(t, h2); r.Status != StatusSatisfied || r.Evaluations != 1 {
		t.Fatalf("second wait %+v", r)
	}
}

func TestOutputSinceFailsWhenSessionEndsSilently(t *testing.T) {
	m := newManager(t)
	e := newEngine(t, Caps{})
	s := open(t, m, "/bin/sh", "-c", "read x; exit 3")
	h, err := e.Register(context.Background(), Request{ID: "w-final", Kind: KindOutputSince, Deadline: deadline(testTimeout),
		SinceSeq: s.Events().LastSeq() + 1000, Source: SessionSource(s)})
	must(t, err)
	must(t, s.Input([]byte("\n")))
	r := result(t, h)
	if r.Status != StatusFailed || r.Err != nil {
		t.Fatalf("result %+v, want Failed (condition can no longer hold)", r)
	}
}

func TestQuiescentAfterSilence(t *testing.T) {
	m := newManager(t)
	e := newEngine(t, Caps{})
	s := open(t, m, "/bin/sh", "-c", `read x; printf working; sleep 0.3; printf ...; exec cat`)
	must(t, s.Input([]byte("\n")))
	const quiet = 400 * time.Millisecond
	start := time.Now()
	h, err := e.Register(context.Background(), Request{ID: "w-quiet", Kind: KindQuiescent, Deadline: deadline(testTimeout),
		Quiet: quiet, SinceSeq: s.Events().LastSeq(), Source: SessionSource(s)})
	must(t, err)
	r := result(t, h)
	if r.Status != StatusSatisfied {
		t.Fatalf("result %+v", r)
	}
	if el := time.Since(start); el < quiet+250*time.Millisecond {
		t.Fatalf("quiescent after %s: the 0.3 s pause plus the %s window had not elapsed", el, quiet)
	}
	if !slices.Contains(r.Diagnostics, DiagQuiescent) || slices.Contains(r.Diagnostics, DiagWaitingForInput) {
		t.Fatalf("diagnostics %v: want quiescent, not waiting-for-input (line ends with '...')", r.Diagnostics)
	}
	if r.Evaluations > 20 {
		t.Fatalf("%d evaluations: the engine polled", r.Evaluations)
	}
	t.Logf("quiescent after %s, %d evaluations", r.Duration, r.Evaluations)
}

func TestWaitingForInputOnPrompt(t *testing.T) {
	m := newManager(t)
	e := newEngine(t, Caps{})
	s := open(t, m, "/bin/sh", "-c", `printf 'Overwrite file? [y/N]? '; exec cat`)
	h, err := e.Register(context.Background(), Request{ID: "w-prompt", Kind: KindQuiescent, Deadline: deadline(testTimeout),
		Quiet: 300 * time.Millisecond, Source: SessionSource(s)})
	must(t, err)
	r := result(t, h)
	if r.Status != StatusSatisfied || !slices.Contains(r.Diagnostics, DiagWaitingForInput) {
		t.Fatalf("result %+v: want waiting-for-input", r)
	}
	// A probe sees the same, and the process is untouched.
	p, err := e.Probe(context.Background(), Request{ID: "p-prompt", Kind: KindQuiescent, Quiet: 300 * time.Millisecond, Source: SessionSource(s)}, 0)
	must(t, err)
	if p.Result != ProbePass || !slices.Contains(p.Diagnostics, DiagWaitingForInput) {
		t.Fatalf("probe %+v", p)
	}
	if s.Phase() != session.PhaseRunning {
		t.Fatalf("phase %s", s.Phase())
	}
}

func TestDeadlineTimesOutAndKillsNothing(t *testing.T) {
	m := newManager(t)
	e := newEngine(t, Caps{})
	s := open(t, m, "/bin/cat")
	start := time.Now()
	h, err := e.Register(context.Background(), Request{ID: "w-timeout", Kind: KindOutputMatches, Deadline: deadline(700 * time.Millisecond),
		Pattern: regexp.MustCompile(`never`), Quiet: 100 * time.Millisecond, Source: SessionSource(s)})
	must(t, err)
	r := result(t, h)
	if r.Status != StatusTimedOut || time.Since(start) < 650*time.Millisecond {
		t.Fatalf("result %+v after %s", r, time.Since(start))
	}
	for _, d := range []Diagnostic{DiagQuiescent, DiagNoProgress, DiagMaybeHung} {
		if !slices.Contains(r.Diagnostics, d) {
			t.Fatalf("diagnostics %v lack %s", r.Diagnostics, d)
		}
	}
	if s.Phase() != session.PhaseRunning || !alive(s.Info().Pid) {
		t.Fatalf("after the timeout the session is %s (pid alive %v): a wait must never kill", s.Phase(), alive(s.Info().Pid))
	}
	// The session still works.
	h2, err := e.Register(context.Background(), Request{ID: "w-after", Kind: KindOutputSince, Deadline: deadline(testTimeout),
		SinceSeq: s.Events().LastSeq(), Source: SessionSource(s)})
	must(t, err)
	must(t, s.Input([]byte("still here\n")))
	if r := result(t, h2); r.Status != StatusSatisfied {
		t.Fatalf("after timeout: %+v", r)
	}
}

func TestNoProgressAndProcessAlive(t *testing.T) {
	m := newManager(t)
	e := newEngine(t, Caps{})
	s := open(t, m, "/bin/cat")
	h, err := e.Register(context.Background(), Request{ID: "w-np", Kind: KindNoProgress, Deadline: deadline(testTimeout),
		Quiet: 200 * time.Millisecond, Source: SessionSource(s)})
	must(t, err)
	if r := result(t, h); r.Status != StatusSatisfied || !slices.Contains(r.Diagnostics, DiagNoProgress) {
		t.Fatalf("no-progress %+v", r)
	}
	p, err := e.Probe(context.Background(), Request{ID: "p-alive", Kind: KindProcessAlive, Source: SessionSource(s)}, time.Second)
	must(t, err)
	if p.Result != ProbePass {
		t.Fatalf("alive probe %+v", p)
	}
	hAlive, err := e.Register(context.Background(), Request{ID: "w-alive", Kind: KindProcessAlive, Deadline: deadline(testTimeout), Source: SessionSource(s)})
	must(t, err)
	if r := result(t, hAlive); r.Status != StatusSatisfied {
		t.Fatalf("alive wait %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	must(t, s.Close(ctx))
	p, err = e.Probe(context.Background(), Request{ID: "p-dead", Kind: KindProcessAlive, Source: SessionSource(s)}, time.Second)
	must(t, err)
	if p.Result != ProbeFail || len(p.Diagnostics) != 0 {
		t.Fatalf("probe after close %+v", p)
	}
}

func TestCancel(t *testing.T) {
	m := newManager(t)
	e := newEngine(t, Caps{})
	s := open(t, m, "/bin/cat")
	req := Request{ID: "w-cancel", Kind: KindOutputSince, Deadline: deadline(time.Minute), SinceSeq: s.Events().LastSeq(), Source: SessionSource(s)}
	h, err := e.Register(context.Background(), req)
	must(t, err)
	// Same ID, same kind: the pending wait is returned; another kind refuses.
	h2, err := e.Register(context.Background(), req)
	if err != nil || h2 != h {
		t.Fatalf("idempotent register: %v, same handle %v", err, h2 == h)
	}
	bad := req
	bad.Kind = KindQuiescent
	bad.Quiet = time.Second
	_, err = e.Register(context.Background(), bad)
	wantCode(t, err, string(actuation.CodeWaitScopeInvalid))
	h.Cancel()
	h.Cancel()
	if r := result(t, h); r.Status != StatusCancelled {
		t.Fatalf("cancel: %+v", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req.ID = "w-ctx"
	h, err = e.Register(ctx, req)
	must(t, err)
	cancel()
	if r := result(t, h); r.Status != StatusCancelled {
		t.Fatalf("ctx cancel: %+v", r)
	}
	req.ID = "w-close"
	h, err = e.Register(context.Background(), req)
	must(t, err)
	e.Close()
	if r := result(t, h); r.Status != StatusCancelled || r.Reason != "engine closed" {
		t.Fatalf("engine close: %+v", r)
	}
	_, err = e.Register(context.Background(), req)
	wantCode(t, err, string(actuation.CodeInterrupted))
	st := e.Stats()
	if st.Pending != 0 || st.Finished[StatusCancelled] != 3 {
		t.Fatalf("stats %+v", st)
	}
	if !alive(s.Info().Pid) {
		t.Fatal("cancel killed the session")
	}
}

func TestRefusals(t *testing.T) {
	m := newManager(t)
	s := open(t, m, "/bin/cat")
	e := newEngine(t, Caps{PendingWaits: 2, MaxDeadline: time.Minute})
	src := SessionSource(s)
	ok := Request{Kind: KindOutputSince, Deadline: deadline(30 * time.Second), SinceSeq: 1 << 40, Source: src}
	for i := 0; i < 2; i++ {
		r := ok
		r.ID = fmt.Sprintf("w-%d", i)
		_, err := e.Register(context.Background(), r)
		must(t, err)
	}
	r := ok
	r.ID = "w-3"
	_, err := e.Register(context.Background(), r)
	wantCode(t, err, string(actuation.CodeQueueFull))

	e2 := newEngine(t, Caps{MaxDeadline: time.Minute})
	cases := []struct {
		name string
		mod  func(*Request)
		code string
	}{
		{"deadline above max", func(r *Request) { r.Deadline = deadline(2 * time.Minute) }, string(actuation.CodeDeadlineAboveMax)},
		{"no deadline", func(r *Request) { r.Deadline = time.Time{} }, string(actuation.CodeDeadlineAboveMax)},
		{"no source", func(r *Request) { r.Source = nil }, string(actuation.CodeWaitScopeInvalid)},
		{"nil session", func(r *Request) { r.Source = SessionSource(nil) }, string(actuation.CodeWaitScopeInvalid)},
		{"unknown kind", func(r *Request) { r.Kind = "terminal.vibes" }, string(actuation.CodeWaitScopeInvalid)},
		{"kind the source cannot evaluate", func(r *Request) { r.Kind = KindFileExists }, string(actuation.CodeWaitScopeInvalid)},
		{"matches without pattern", func(r *Request) { r.Kind = KindOutputMatches }, string(actuation.CodeWaitScopeInvalid)},
		{"pattern too long", func(r *Request) {
			r.Kind, r.Pattern = KindOutputMatches, regexp.MustCompile(fmt.Sprintf("a{1}%0300d", 0))
		}, string(actuation.CodeWaitScopeInvalid)},
		{"quiescent without window", func(r *Request) { r.Kind = KindQuiescent }, string(actuation.CodeWaitScopeInvalid)},
		{"quiet above max", func(r *Request) { r.Kind, r.Quiet = KindQuiescent, MaxQuiet+time.Second }, string(actuation.CodeWaitScopeInvalid)},
		{"empty ID", func(r *Request) { r.ID = "" }, string(actuation.CodeWaitScopeInvalid)},
		{"bad previous digest", func(r *Request) {
			r.Kind, r.PrevDigest = KindDigestChanged, "md5:abc"
			r.Source = FuncSource(nil, func(*Request) (Observation, error) { return Observation{}, nil })
		}, string(actuation.CodeWaitScopeInvalid)},
		{"nil observe", func(r *Request) { r.Source = FuncSource(nil, nil) }, string(actuation.CodeWaitScopeInvalid)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ok
			r.ID = "w-x"
			c.mod(&r)
			_, err := e2.Register(context.Background(), r)
			wantCode(t, err, c.code)
		})
	}
	if e2.Pending() != 0 {
		t.Fatalf("refused waits pending: %d", e2.Pending())
	}
}

func TestFuncSourceCommandDoneAndProbes(t *testing.T) {
	e := newEngine(t, Caps{ConcurrentProbes: 1})
	var b Broadcaster
	var done atomic.Bool
	var evals atomic.Int32
	src := FuncSource(b.Changed, func(*Request) (Observation, error) {
		evals.Add(1)
		if done.Load() {
			return Observation{Satisfied: true, Detail: "exit 0"}, nil
		}
		return Observation{Detail: "running"}, nil
	})
	h, err := e.Register(context.Background(), Request{ID: "w-cmd", Kind: KindCommandDone, Deadline: deadline(testTimeout), Source: src})
	must(t, err)
	b.Broadcast() // a change that does not satisfy
	time.Sleep(50 * time.Millisecond)
	done.Store(true)
	b.Broadcast()
	r := result(t, h)
	if r.Status != StatusSatisfied || r.Observation.Detail != "exit 0" {
		t.Fatalf("command done %+v", r)
	}
	if n := evals.Load(); n < 2 || n > 4 {
		t.Fatalf("%d evaluations for two broadcasts", n)
	}

	// A source error fails the wait with the error.
	boom := fmt.Errorf("store unavailable")
	h, err = e.Register(context.Background(), Request{ID: "w-err", Kind: KindOperationDone, Deadline: deadline(testTimeout),
		Source: FuncSource(nil, func(*Request) (Observation, error) { return Observation{}, boom })})
	must(t, err)
	if r := result(t, h); r.Status != StatusFailed || r.Err != boom {
		t.Fatalf("source error %+v", r)
	}

	// A source that never changes ends at its deadline.
	h, err = e.Register(context.Background(), Request{ID: "w-static", Kind: KindArtifact, Deadline: deadline(200 * time.Millisecond),
		Source: FuncSource(nil, func(*Request) (Observation, error) { return Observation{}, nil })})
	must(t, err)
	if r := result(t, h); r.Status != StatusTimedOut || r.Evaluations != 2 {
		t.Fatalf("static source %+v", r)
	}

	// Probes: a hung source answers Error/probe-failed at the timeout and
	// holds the only probe slot until it returns.
	release := make(chan struct{})
	hung := FuncSource(nil, func(*Request) (Observation, error) { <-release; return Observation{Satisfied: true}, nil })
	start := time.Now()
	p, err := e.Probe(context.Background(), Request{ID: "p-hung", Kind: KindEnvironment, Source: hung}, 200*time.Millisecond)
	must(t, err)
	if p.Result != ProbeError || !slices.Contains(p.Diagnostics, DiagProbeFailed) || time.Since(start) > 2*time.Second {
		t.Fatalf("hung probe %+v", p)
	}
	_, err = e.Probe(context.Background(), Request{ID: "p-2", Kind: KindEnvironment, Source: hung}, time.Second)
	wantCode(t, err, string(actuation.CodeQueueFull))
	close(release)
	_, err = e.Probe(context.Background(), Request{ID: "p-3", Kind: KindEnvironment, Source: src}, MaxProbeTimeout+time.Second)
	wantCode(t, err, string(actuation.CodeTimeoutAboveMax))
}

func TestMisbehavingSourceDoesNotSpin(t *testing.T) {
	e := newEngine(t, Caps{})
	closed := make(chan struct{})
	close(closed)
	h, err := e.Register(context.Background(), Request{ID: "w-spin", Kind: KindOperationDone, Deadline: deadline(testTimeout),
		Source: FuncSource(func() <-chan struct{} { return closed }, func(*Request) (Observation, error) { return Observation{Detail: "same"}, nil })})
	must(t, err)
	if r := result(t, h); r.Status != StatusFailed || r.Evaluations > maxSpin+2 {
		t.Fatalf("spinning source %+v", r)
	}
}

func TestStripANSI(t *testing.T) {
	in := "\x1b[1;32mgreen\x1b[0m \x1b]0;title\x07ti\x1b(Btle\r\n\x1b[?25l\x1bP1$r\x1b\\x\x1b["
	if got := StripANSI([]byte(in)); got != "green title\nx" {
		t.Fatalf("StripANSI = %q", got)
	}
}

func TestPromptLike(t *testing.T) {
	cases := []struct {
		line string
		col  int
		want bool
	}{
		{"user@host:~$", 13, true},
		{"Password:", 9, true},
		{">>>", 4, true},
		{"Continue? [y/N]", 16, false},
		{"Building...", 11, false},
		{"$", 5, false}, // cursor away from the text
		{"", 0, false},
	}
	for _, c := range cases {
		s := &session.Snapshot{Lines: []string{c.line}, CursorRow: 0, CursorCol: c.col}
		if got := promptLike(s); got != c.want {
			t.Errorf("promptLike(%q, col %d) = %v", c.line, c.col, got)
		}
	}
}

func TestMatchSpansEvaluations(t *testing.T) {
	m := newManager(t)
	e := newEngine(t, Caps{})
	s := open(t, m, "/bin/sh", "-c", `printf 'step abc'; read x; printf 'def done'; exec cat`)
	since := s.Events().LastSeq()
	first, err := e.Register(context.Background(), Request{ID: "w-abc", Kind: KindOutputMatches, Deadline: deadline(testTimeout),
		Pattern: regexp.MustCompile(`abc$`), Source: SessionSource(s)})
	must(t, err)
	if r := result(t, first); r.Status != StatusSatisfied {
		t.Fatalf("first part %+v", r)
	}
	h, err := e.Register(context.Background(), Request{ID: "w-span", Kind: KindOutputMatches, Deadline: deadline(testTimeout),
		Pattern: regexp.MustCompile(`abc\ndef done`), SinceSeq: since, Source: SessionSource(s)})
	must(t, err)
	pendingFor(t, h, 100*time.Millisecond)
	must(t, s.Input([]byte("\n")))
	if r := result(t, h); r.Status != StatusSatisfied || r.Evaluations < 2 {
		t.Fatalf("spanning match %+v", r)
	}
}

func TestOutputSinceScansBehindTheWindow(t *testing.T) {
	m := newManager(t)
	e := newEngine(t, Caps{})
	s := open(t, m, "/bin/cat")
	since := s.Events().LastSeq()
	h, err := e.Register(context.Background(), Request{ID: "w-echo", Kind: KindOutputSince, Deadline: deadline(testTimeout), SinceSeq: since, Source: SessionSource(s)})
	must(t, err)
	must(t, s.Input([]byte("x\n")))
	if r := result(t, h); r.Status != StatusSatisfied {
		t.Fatalf("echo %+v", r)
	}
	// More than ScanEvents events without output follow the output.
	for i := 0; i < ScanEvents+50; i++ {
		must(t, s.Resize(uint16(20+i%5), 80))
	}
	h, err = e.Register(context.Background(), Request{ID: "w-behind", Kind: KindOutputSince, Deadline: deadline(time.Second), SinceSeq: since, Source: SessionSource(s)})
	must(t, err)
	r := result(t, h)
	if r.Status != StatusSatisfied || r.Evaluations != 1 || r.Observation.SeqFrom <= since {
		t.Fatalf("output behind the window %+v", r)
	}
}

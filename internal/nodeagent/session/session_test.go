package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/platform/procexec"
)

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper() // session programs start through the sandbox helper (this binary)
	// Orphaned members of a killed group are re-parented to the test binary
	// so it can reap them and confirm the group gone (as the agent does).
	if err := procexec.EnableSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "EnableSubreaper:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

const testTimeout = 10 * time.Second

var shellEnv = []string{"PATH=/usr/bin:/bin"}

type harness struct {
	t      *testing.T
	m      *Manager
	phases chan PhaseChange
}

// newHarness is a manager with caps and opts whose phase changes the harness records; it
// is shut down when the test ends.
func newHarness(t *testing.T, caps Caps, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t, phases: make(chan PhaseChange, 1024)}
	h.m = NewManager(caps, append(opts, WithObserver(func(pc PhaseChange) {
		select {
		case h.phases <- pc:
		default:
		}
	}))...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := h.m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return h
}

func (h *harness) open(spec Spec) *Session {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	s, err := h.m.Open(ctx, spec)
	if err != nil {
		h.t.Fatalf("Open(%s %q): %v", spec.ID, spec.Argv, err)
	}
	return s
}

// waitPhase consumes observer notifications until session id reaches phase.
func (h *harness) waitPhase(id string, phase Phase, within time.Duration) PhaseChange {
	h.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case pc := <-h.phases:
			if pc.SessionID == id && pc.To == phase {
				return pc
			}
		case <-deadline:
			now := Phase("gone")
			if s, ok := h.m.Get(id); ok {
				now = s.Phase()
			}
			h.t.Fatalf("session %s did not reach phase %s within %s (now %s)", id, phase, within, now)
		}
	}
}

// waitOutput long-polls the ring until the accumulated output contains want.
func waitOutput(t *testing.T, s *Session, want string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out bytes.Buffer
	var cursor uint64
	for {
		evs, next, _ := s.Read(cursor, 0)
		for _, e := range evs {
			if e.Kind == ring.KindOutput {
				out.Write(e.Data)
			}
		}
		cursor = next
		if strings.Contains(out.String(), want) {
			return out.String()
		}
		if err := s.Events().Wait(ctx, cursor); err != nil {
			t.Fatalf("output %q never contained %q: %v", out.String(), want, err)
		}
	}
}

func closeSession(t *testing.T, s *Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close(%s): %v", s.ID(), err)
	}
}

func waitDone(t *testing.T, s *Session) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(testTimeout):
		t.Fatalf("session %s not done within %s (phase %s, cleanup err %v)", s.ID(), testTimeout, s.Phase(), s.CleanupError())
	}
}

func phasesOf(s *Session) []Phase {
	var out []Phase
	for _, pc := range s.History() {
		out = append(out, pc.To)
	}
	return out
}

func TestEchoRoundTripAndLifecycle(t *testing.T) {
	h := newHarness(t, Caps{})
	s := h.open(Spec{ID: "echo", EnvironmentID: "env-a", Argv: []string{"/bin/cat"}})
	info := s.Info()
	if info.Pid <= 1 || info.Pgid != info.Pid || info.Sid != info.Pid || !strings.HasPrefix(info.TTY, "/dev/pts/") {
		t.Fatalf("info %+v", info)
	}
	st, err := procexec.ReadStat(info.Pid)
	if err != nil || st.StartTime != info.StartTime || st.Sid != info.Pid || st.Pgid != info.Pid {
		t.Fatalf("/proc stat %+v (err %v) does not match info %+v", st, err, info)
	}
	rc, _ := s.master.SyscallConn()
	var flags int
	if err := rc.Control(func(fd uintptr) { flags, _ = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil {
		t.Fatal(err)
	}
	if flags&unix.O_NONBLOCK == 0 {
		t.Fatal("pty master is in blocking mode: deadlines and Close cannot unblock its pumps")
	}
	if err := s.Input([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, s, "hello\r\nhello\r\n") // tty echo + cat's copy
	if s.CleanupComplete() {
		t.Fatal("CleanupComplete before close")
	}
	closeSession(t, s)
	evs, _, _ := s.Read(0, 0) // the closed ring stays readable
	var sawInput bool
	for _, e := range evs {
		if e.Kind == ring.KindInput {
			sawInput = true
			if e.Data != nil || e.Bytes != 6 {
				t.Fatalf("input event must be metadata only: %+v", e)
			}
		}
	}
	if !sawInput {
		t.Fatal("no input event recorded")
	}
	want := []Phase{PhaseRequested, PhaseStarting, PhaseRunning, PhaseClosing, PhaseClosed}
	if got := phasesOf(s); !slices.Equal(got, want) {
		t.Fatalf("phases %v, want %v", got, want)
	}
	if ex := s.Exit(); ex.Origin != "close" || !s.CleanupComplete() {
		t.Fatalf("exit %+v cleanup %v", ex, s.CleanupComplete())
	}
	if h.m.Active() != 0 {
		t.Fatalf("slot not released: %d active", h.m.Active())
	}
	if err := s.Input([]byte("x")); !(actuation.CodeOf(err) == actuation.CodeSessionNotRunning) {
		t.Fatalf("input after close: %v", err)
	}
	if st := s.Events().Stats(); !st.Closed || st.OutputBytes == 0 {
		t.Fatalf("ring stats after close %+v", st)
	}
}

func TestEnvironmentIsCurated(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "/tmp/ssh-agent.sock")
	h := newHarness(t, Caps{})
	s := h.open(Spec{ID: "env", Argv: []string{"/usr/bin/env"}, Env: []string{"A=1", "TERM=xterm"}})
	waitDone(t, s)
	out := waitOutput(t, s, "")
	if out != "A=1\r\nTERM=xterm\r\n" {
		t.Fatalf("session environment %q", out)
	}
}

func TestScreenSnapshot(t *testing.T) {
	h := newHarness(t, Caps{})
	s := h.open(Spec{ID: "screen", Argv: []string{"/usr/bin/printf", `\033[2J\033[Hline1\n\033[3;5Hxy\033[1;31mz\033[0m`},
		Rows: 6, Cols: 20})
	waitDone(t, s)
	snap := s.Screen()
	want := []string{"line1", "", "    xyz"}
	if !slices.Equal(snap.Lines, want) || snap.CursorRow != 2 || snap.CursorCol != 7 {
		t.Fatalf("snapshot lines %q cursor (%d,%d), want %q cursor (2,7)", snap.Lines, snap.CursorRow, snap.CursorCol, want)
	}
	if snap.Rows != 6 || snap.Cols != 20 || len(snap.Digest) != 64 || snap.Seq == 0 || snap.OutputBytes == 0 {
		t.Fatalf("snapshot metadata %+v", snap)
	}

	// Bounds: many long lines on a small terminal.
	s = h.open(Spec{ID: "bounded", Argv: []string{"/bin/sh", "-c", `i=0; while [ $i -lt 50 ]; do echo "line $i: ääääääääääääääääääääääääääääää"; i=$((i+1)); done`},
		Env: shellEnv, Rows: 5, Cols: 12})
	waitDone(t, s)
	snap = s.Screen()
	if len(snap.Lines) > 5 {
		t.Fatalf("%d lines on a 5-row screen", len(snap.Lines))
	}
	for _, l := range snap.Lines {
		if n := len([]rune(l)); n > 12 {
			t.Fatalf("line %q has %d runes on a 12-column screen", l, n)
		}
	}
	if !slices.ContainsFunc(snap.Lines, func(l string) bool { return strings.Contains(l, "ää") }) {
		t.Fatalf("expected wrapped text in %q", snap.Lines)
	}
}

func TestResizeSeenBySttySize(t *testing.T) {
	h := newHarness(t, Caps{})
	s := h.open(Spec{ID: "resize", Argv: []string{"/bin/sh", "-c", "stty size; read _; stty size; read _"},
		Env: shellEnv, Rows: 24, Cols: 80})
	waitOutput(t, s, "24 80")
	if err := s.Resize(40, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.Input([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, s, "40 100")
	if snap := s.Screen(); snap.Rows != 40 || snap.Cols != 100 {
		t.Fatalf("screen model not resized: %dx%d", snap.Rows, snap.Cols)
	}
	if err := s.Resize(0, 10); !(actuation.CodeOf(err) == actuation.CodeInvalidSpec) {
		t.Fatalf("resize 0x10: %v", err)
	}
	closeSession(t, s)
}

func TestCapsRefusals(t *testing.T) {
	h := newHarness(t, Caps{Sessions: 2})
	cat := func(id, env string) Spec { return Spec{ID: id, EnvironmentID: env, Argv: []string{"/bin/cat"}} }
	s1 := h.open(cat("a1", "env-a"))
	h.open(cat("a2", "env-a"))
	if _, err := h.m.Open(context.Background(), cat("a3", "env-b")); !(actuation.CodeOf(err) == actuation.CodeSessionCapReached) {
		t.Fatalf("third session: %v", err)
	}
	if _, err := h.m.Open(context.Background(), cat("a1", "env-b")); !(actuation.CodeOf(err) == actuation.CodeSessionExists) {
		t.Fatalf("duplicate id: %v", err)
	}
	closeSession(t, s1)
	h.open(cat("a3", "env-b")) // the slot was released

	// Per environment.
	h2 := newHarness(t, Caps{Sessions: 3, SessionsPerEnvironment: 1})
	h2.open(cat("b1", "env-a"))
	if _, err := h2.m.Open(context.Background(), cat("b2", "env-a")); !(actuation.CodeOf(err) == actuation.CodeSessionCapReached) {
		t.Fatalf("second session in env-a: %v", err)
	}
	h2.open(cat("b3", "env-b"))

	// Reader tasks: output pumps and long-polls share the permits.
	h3 := newHarness(t, Caps{Sessions: 3, SessionsPerEnvironment: 3, ReaderTasks: 2})
	c1 := h3.open(cat("c1", "e"))
	h3.open(cat("c2", "e"))
	if _, err := h3.m.Open(context.Background(), cat("c3", "e")); !(actuation.CodeOf(err) == actuation.CodeReaderCapReached) {
		t.Fatalf("third pump: %v", err)
	}
	if err := c1.WaitEvents(context.Background(), 0); !(actuation.CodeOf(err) == actuation.CodeReaderCapReached) {
		t.Fatalf("long-poll without a permit: %v", err)
	}
	closeSession(t, c1)
	s2, _ := h3.m.Get("c2")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := s2.WaitEvents(ctx, 0); err != nil { // status events exist after seq 0
		t.Fatalf("long-poll with a free permit: %v", err)
	}

	// Spec-level refusals.
	for name, c := range map[string]struct {
		spec Spec
		code string
	}{
		"event buffer": {Spec{ID: "x", Argv: []string{"/bin/cat"}, EventBufferDepth: DefaultEventBufferDepth + 1}, string(actuation.CodeEventBufferFull)},
		"max duration": {Spec{ID: "x", Argv: []string{"/bin/cat"}, MaxDuration: DefaultMaxDurationCeiling + 1}, string(actuation.CodeTimeoutAboveMax)},
		"grace":        {Spec{ID: "x", Argv: []string{"/bin/cat"}, Grace: MaxGrace + 1}, string(actuation.CodeTimeoutAboveMax)},
		"relative":     {Spec{ID: "x", Argv: []string{"cat"}}, string(actuation.CodeInvalidSpec)},
		"no id":        {Spec{Argv: []string{"/bin/cat"}}, string(actuation.CodeInvalidSpec)},
		"huge tty":     {Spec{ID: "x", Argv: []string{"/bin/cat"}, Rows: MaxRows + 1}, string(actuation.CodeInvalidSpec)},
		"bad env":      {Spec{ID: "x", Argv: []string{"/bin/cat"}, Env: []string{"=x"}}, string(actuation.CodeInvalidSpec)},
	} {
		if _, err := NewManager(Caps{}).Open(context.Background(), c.spec); !(actuation.CodeOf(err) == actuation.Code(c.code)) {
			t.Errorf("%s: got %v, want %s", name, err, c.code)
		}
	}
}

func TestInputQueueFullAndTooLarge(t *testing.T) {
	h := newHarness(t, Caps{InputQueueDepth: 2})
	s := h.open(Spec{ID: "q", Argv: []string{"/bin/sh", "-c", "stty raw -echo; echo ready; exec sleep 30"}, Env: shellEnv})
	waitOutput(t, s, "ready")
	if err := s.Input(make([]byte, DefaultMaxInputBytes+1)); !(actuation.CodeOf(err) == actuation.CodeInputTooLarge) {
		t.Fatalf("oversized input: %v", err)
	}
	chunk := bytes.Repeat([]byte("z"), DefaultMaxInputBytes)
	var err error
	for i := 0; i < 4096 && err == nil; i++ { // at most 16 MiB before the tty must push back
		err = s.Input(chunk)
	}
	if !(actuation.CodeOf(err) == actuation.CodeQueueFull) {
		t.Fatalf("flooding a program that never reads: %v", err)
	}
	start := time.Now()
	closeSession(t, s) // a writer blocked on the full tty must not wedge Close
	if time.Since(start) > 5*time.Second {
		t.Fatalf("close took %s", time.Since(start))
	}
}

func TestIdleAndBackToRunning(t *testing.T) {
	h := newHarness(t, Caps{})
	s := h.open(Spec{ID: "idle", Argv: []string{"/bin/cat"}, IdleTimeout: 150 * time.Millisecond})
	pc := h.waitPhase("idle", PhaseIdle, 5*time.Second)
	if pc.From != PhaseRunning {
		t.Fatalf("idle from %s", pc.From)
	}
	if err := s.Input([]byte("wake\n")); err != nil {
		t.Fatal(err)
	}
	h.waitPhase("idle", PhaseRunning, 5*time.Second)
	h.waitPhase("idle", PhaseIdle, 5*time.Second) // quiet again
	closeSession(t, s)
	if s.Phase() != PhaseClosed {
		t.Fatalf("phase %s", s.Phase())
	}
}

func TestMaxDurationExpires(t *testing.T) {
	h := newHarness(t, Caps{})
	s := h.open(Spec{ID: "exp", Argv: []string{"/bin/sleep", "30"}, MaxDuration: 200 * time.Millisecond})
	waitDone(t, s)
	ex := s.Exit()
	if s.Phase() != PhaseExpired || ex.Origin != "expired" || ex.Signal == "" || !s.CleanupComplete() {
		t.Fatalf("phase %s exit %+v cleanup %v", s.Phase(), ex, s.CleanupComplete())
	}
}

func TestCloseKillsGrandchildIgnoringHangup(t *testing.T) {
	h := newHarness(t, Caps{})
	const grace = 300 * time.Millisecond
	// The shell and its background grandchild both ignore SIGHUP and SIGTERM.
	s := h.open(Spec{ID: "gc", Grace: grace, Env: shellEnv,
		Argv: []string{"/bin/sh", "-c", `trap "" HUP TERM; /bin/sleep 300 & echo child=$!; wait`}})
	out := waitOutput(t, s, "\r\n")
	inner, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(out, "child=")))
	if err != nil {
		t.Fatalf("grandchild pid from %q: %v", out, err)
	}
	// The shell prints the pid inside the sandbox's PID namespace.
	gpid, err := procexec.HostPid(s.Info().Pid, inner)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := procexec.ReadStat(gpid); err != nil || st.Pgid != s.Info().Pgid {
		t.Fatalf("grandchild %d stat %+v err %v (want pgid %d)", gpid, st, err, s.Info().Pgid)
	}
	start := time.Now()
	closeSession(t, s)
	if el := time.Since(start); el < grace {
		t.Fatalf("Close returned after %s, before the %s grace period: the HUP/TERM-ignoring group cannot be gone", el, grace)
	}
	if !s.CleanupComplete() {
		t.Fatal("CleanupComplete false after Close returned")
	}
	if err := unix.Kill(gpid, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("grandchild %d still exists: %v", gpid, err)
	}
	if exists, err := procexec.GroupExists(s.Info().Pgid); exists || err != nil {
		t.Fatalf("group %d exists=%v err=%v", s.Info().Pgid, exists, err)
	}
	if ex := s.Exit(); ex.Signal != "SIGKILL" || s.Phase() != PhaseClosed {
		t.Fatalf("exit %+v phase %s", ex, s.Phase())
	}
	// Close is idempotent.
	n := len(s.History())
	start = time.Now()
	closeSession(t, s)
	if time.Since(start) > 100*time.Millisecond || len(s.History()) != n || s.Phase() != PhaseClosed {
		t.Fatalf("second Close changed state or blocked: %s, history %d -> %d", time.Since(start), n, len(s.History()))
	}
}

func TestCloseKillsOtherProcessGroupsOfTheSession(t *testing.T) {
	h := newHarness(t, Caps{})
	// With job control (set -m) the background job gets its own process
	// group inside the session; kill(-pgid) alone would miss it.
	s := h.open(Spec{ID: "jobs", Env: shellEnv, Grace: 300 * time.Millisecond,
		Argv: []string{"/bin/sh", "-c", `set -m; /bin/sleep 300 & echo bg=$!; wait`}})
	out := waitOutput(t, s, "\r\n")
	inner, err := strconv.Atoi(strings.TrimSpace(out[strings.Index(out, "bg=")+3:]))
	if err != nil {
		t.Fatalf("background pid from %q: %v", out, err)
	}
	bg, err := procexec.HostPid(s.Info().Pid, inner)
	if err != nil {
		t.Fatal(err)
	}
	st, err := procexec.ReadStat(bg)
	if err != nil || st.Sid != s.Info().Sid {
		t.Fatalf("background job stat %+v err %v", st, err)
	}
	if st.Pgid == s.Info().Pgid {
		t.Logf("note: the shell did not move the job to its own group (pgid %d)", st.Pgid)
	}
	closeSession(t, s)
	if err := unix.Kill(bg, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("background job %d (pgid %d) survived Close: %v", bg, st.Pgid, err)
	}
	if left, _ := procexec.SessionMembers(s.Info().Sid); len(left) != 0 || !s.CleanupComplete() {
		t.Fatalf("session members left: %+v", left)
	}
}

func TestSignalAndNaturalExit(t *testing.T) {
	h := newHarness(t, Caps{})
	s := h.open(Spec{ID: "sig", Argv: []string{"/bin/sleep", "30"}})
	if err := s.Signal(syscall.SIGSEGV); !(actuation.CodeOf(err) == actuation.CodeInvalidSpec) {
		t.Fatalf("SIGSEGV: %v", err)
	}
	if err := s.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitDone(t, s)
	if ex := s.Exit(); ex.Signal != "SIGINT" || ex.Origin != "exit" || s.Phase() != PhaseClosed {
		t.Fatalf("exit %+v phase %s", ex, s.Phase())
	}
	evs, _, _ := s.Read(0, 0)
	kinds := map[ring.Kind]string{}
	for _, e := range evs {
		kinds[e.Kind] = string(e.Data)
	}
	if kinds[ring.KindSignal] != "SIGINT" || kinds[ring.KindExit] != "signal=SIGINT" || kinds[ring.KindStatus] != string(PhaseClosed) {
		t.Fatalf("events %v", kinds)
	}
	if err := s.Signal(syscall.SIGINT); !(actuation.CodeOf(err) == actuation.CodeSessionNotRunning) {
		t.Fatalf("signal after end: %v", err)
	}

	s = h.open(Spec{ID: "exit7", Env: shellEnv, Argv: []string{"/bin/sh", "-c", "exit 7"}})
	waitDone(t, s)
	if ex := s.Exit(); ex.Code != 7 || ex.Origin != "exit" || !s.CleanupComplete() {
		t.Fatalf("exit %+v", ex)
	}
}

func TestFailedStartReleasesSlot(t *testing.T) {
	h := newHarness(t, Caps{Sessions: 1})
	if _, err := h.m.Open(context.Background(), Spec{ID: "bad", Argv: []string{"/nonexistent/prog"}}); err == nil || string(actuation.CodeOf(err)) != "" {
		t.Fatalf("missing program: %v", err)
	}
	h.waitPhase("bad", PhaseFailed, time.Second)
	if h.m.Active() != 0 {
		t.Fatal("failed session kept its slot")
	}
	s := h.open(Spec{ID: "good", Argv: []string{"/bin/cat"}})
	closeSession(t, s)
}

func TestKillEndsKilled(t *testing.T) {
	h := newHarness(t, Caps{})
	s := h.open(Spec{ID: "kill", Env: shellEnv, Argv: []string{"/bin/sh", "-c", `trap "" HUP TERM; exec sleep 30`}})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := s.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if ex := s.Exit(); s.Phase() != PhaseKilled || ex.Signal != "SIGKILL" || ex.Origin != "killed" {
		t.Fatalf("phase %s exit %+v", s.Phase(), ex)
	}
}

// TestInstantExitReachesClosed: a program that exits before Open returns must
// still walk requested -> starting -> running -> closing -> closed.
func TestInstantExitReachesClosed(t *testing.T) {
	h := newHarness(t, Caps{})
	want := []Phase{PhaseRequested, PhaseStarting, PhaseRunning, PhaseClosing, PhaseClosed}
	for i := range 20 {
		s := h.open(Spec{ID: fmt.Sprintf("true-%d", i), Argv: []string{"/bin/true"}})
		waitDone(t, s)
		if got := phasesOf(s); !slices.Equal(got, want) || s.Exit().Code != 0 || !s.CleanupComplete() {
			t.Fatalf("run %d: phases %v exit %+v cleanup %v", i, got, s.Exit(), s.CleanupComplete())
		}
	}
}

// TestProgramIsSandboxed: a PTY program runs in the same sandbox as structured commands
// (no capabilities, no_new_privs, seccomp, its own PID namespace with the helper as PID 1,
// only its roots visible) with the terminal as its controlling tty and its root writable.
func TestProgramIsSandboxed(t *testing.T) {
	h := newHarness(t, Caps{})
	root := t.TempDir()
	s := h.open(Spec{ID: "sb", Env: shellEnv, Dir: root, WritableRoots: []string{root},
		Argv: []string{"/bin/sh", "-c", `grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; ` +
			`echo "init=$(cat /proc/1/comm) tty=$(tty) host=$(test -e /etc/shadow && echo yes || echo no)"; ` +
			`echo hi > f && echo wrote; echo done; read _`}})
	out := waitOutput(t, s, "done")
	for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1",
		"Seccomp:\t2", "init=sandbox-init tty=/dev/", "host=no", "wrote"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in %q", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "f")); err != nil {
		t.Errorf("write to the root did not land: %v", err)
	}
	closeSession(t, s)
}

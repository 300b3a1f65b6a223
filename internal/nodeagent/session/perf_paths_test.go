package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// The teardown of a sandboxed session whose program ended does not scan /proc for the
// session's members: the kernel ended the sandbox's PID namespace with its PID 1 (the
// helper, the session's leader). This is what makes that shortcut sound: a process that
// left the session (setsid) and outlives the program is gone, without a signal from the
// teardown, once the session is Closed.
func TestEscapeeEndsWithTheSandboxLeader(t *testing.T) {
	h := newHarness(t, Caps{})
	s := h.open(Spec{ID: "escape", Env: shellEnv, IdleTimeout: -1,
		Argv: []string{"/bin/sh", "-c", `/usr/bin/setsid /bin/sh -c 'echo esc=$$; exec /bin/sleep 300' & read x`}})
	out := waitOutput(t, s, "\r\n")
	m := regexp.MustCompile(`esc=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no escapee pid in %q", out)
	}
	inner, _ := strconv.Atoi(m[1])
	pid, err := procexec.HostPid(s.Info().Pid, inner)
	if err != nil {
		t.Fatal(err)
	}
	st, err := procexec.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sid == s.Info().Sid {
		t.Fatalf("the escapee %d is still in the session %d: setsid did not take", pid, st.Sid)
	}
	born, err := procexec.ProcessStartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Input([]byte("\n")); err != nil { // the shell's read returns: the program exits by itself
		t.Fatal(err)
	}
	waitDone(t, s)
	if s.Phase() != PhaseClosed || s.Exit().Origin != string(originExit) || !s.CleanupComplete() {
		t.Fatalf("phase %s exit %+v cleanup %v", s.Phase(), s.Exit(), s.CleanupComplete())
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		if again, serr := procexec.ProcessStartTime(pid); serr == nil && again == born {
			t.Fatalf("the escapee %d outlived its sandbox's session", pid)
		}
	}
}

// Input writes straight to the terminal when nothing is queued and queues what the
// terminal does not take at once: a stream of inputs larger than the terminal's buffer
// reaches the program whole and in order, and the ring counts every byte once.
func TestInputDirectAndQueuedKeepOrder(t *testing.T) {
	h := newHarness(t, Caps{InputQueueDepth: 64})
	s := h.open(Spec{ID: "order", Env: shellEnv, IdleTimeout: -1,
		Argv: []string{"/bin/sh", "-c", "stty raw -echo; echo ready; exec /bin/cat"}})
	waitOutput(t, s, "ready")
	cursor := s.Events().LastSeq()
	var want bytes.Buffer
	for i := range 48 { // 48 writes of 1,000 bytes: several times what the terminal buffers, not a multiple of it
		chunk := bytes.Repeat([]byte(fmt.Sprintf("%04d", i)), 250)
		want.Write(chunk)
		if err := s.Input(chunk); err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var got bytes.Buffer
	inputBytes := 0
	for got.Len() < want.Len() || inputBytes < want.Len() {
		if err := s.Events().Wait(ctx, cursor); err != nil {
			t.Fatalf("after %d of %d bytes echoed (%d input recorded): %v", got.Len(), want.Len(), inputBytes, err)
		}
		var evs []ring.Event
		evs, cursor, _ = s.Read(cursor, 0)
		for _, e := range evs {
			switch e.Kind {
			case ring.KindOutput:
				got.Write(e.Data)
			case ring.KindInput:
				inputBytes += e.Bytes
			}
		}
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("the program read %d bytes that differ from the %d written (first difference near byte %d)",
			got.Len(), want.Len(), firstDiff(got.Bytes(), want.Bytes()))
	}
	if inputBytes != want.Len() {
		t.Fatalf("the ring recorded %d input bytes, want %d", inputBytes, want.Len())
	}
	closeSession(t, s)
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A Manager with pre-started session sandboxes opens a session on a waiting helper (the
// session's leader is that helper), configured for this session's program and sandboxed
// like any other; the pool refills, and Shutdown leaves no waiting helper behind.
func TestPrestartedSessionSandbox(t *testing.T) {
	h := newHarness(t, Caps{PrestartedSessions: 1})
	if err := h.m.WarmPrestarted(); err != nil {
		t.Fatal(err)
	}
	waiting := h.m.pre.Idle()[0].pt.Pid()
	s := h.open(Spec{ID: "pre", Env: shellEnv, IdleTimeout: -1,
		Argv: []string{"/bin/sh", "-c", "echo host=$(cat /proc/sys/kernel/hostname) pid=$$; read x"}})
	if s.Info().Pid != waiting {
		t.Fatalf("the session's leader is %d, not the pre-started helper %d", s.Info().Pid, waiting)
	}
	out := waitOutput(t, s, "\r\n")
	if !strings.Contains(out, "host="+procexec.SandboxHostname) {
		t.Fatalf("the program does not run in the sandbox: %q", out)
	}
	if err := h.m.WarmPrestarted(); err != nil { // the take started a refill; wait for it
		t.Fatal(err)
	}
	refill := h.m.pre.Idle()[0].pt.Pid()
	if err := s.Input([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	waitDone(t, s)
	if ex := s.Exit(); ex.Code != 0 || s.Phase() != PhaseClosed {
		t.Fatalf("exit %+v phase %s", ex, s.Phase())
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := h.m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(refill, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("the waiting helper %d outlived Shutdown: %v", refill, err)
	}
}

// The pre-started pool is on by default, bounded, and off for a negative size.
func TestPrestartedSessionsDefaultBoundedOff(t *testing.T) {
	for _, tc := range []struct{ set, size int }{{0, DefaultPrestartedSessions}, {100, MaxPrestartedSessions}, {-1, 0}} {
		m := NewManager(Caps{PrestartedSessions: tc.set})
		if got := m.pre.Size(); got != tc.size {
			t.Errorf("PrestartedSessions %d: pool of %d, want %d", tc.set, got, tc.size)
		}
	}
}

package session

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestScreenModelBuiltOnDemand: an idle session holds no emulator; the first Screen builds
// it from the ring, replaying output and resizes in order, and later output keeps it current.
func TestScreenModelBuiltOnDemand(t *testing.T) {
	h := newHarness(t, Caps{})
	s := h.open(Spec{ID: "lazy", Argv: []string{"/bin/cat"}, Rows: 5, Cols: 20, IdleTimeout: -1})
	if err := s.Input([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	waitRingOutput(t, s, "hello\r\nhello")
	if err := s.Resize(4, 10); err != nil {
		t.Fatal(err)
	}
	s.screenMu.Lock()
	built := s.emu != nil
	s.screenMu.Unlock()
	if built {
		t.Fatal("the screen model was built before anybody asked for a screen")
	}
	snap := s.Screen()
	if snap.Rows != 4 || snap.Cols != 10 {
		t.Fatalf("screen %dx%d after resize to 4x10", snap.Rows, snap.Cols)
	}
	if len(snap.Lines) < 2 || snap.Lines[0] != "hello" || snap.Lines[1] != "hello" {
		t.Fatalf("screen lines %q, want the echo and cat's copy", snap.Lines)
	}
	if err := s.Input([]byte("0123456789abc\n")); err != nil {
		t.Fatal(err)
	}
	waitRingOutput(t, s, "0123456789abc\r\n0123456789abc")
	snap = s.Screen()
	if !strings.Contains(strings.Join(snap.Lines, "|"), "0123456789|abc") {
		t.Fatalf("a 13-character line on a 10-column screen did not wrap: %q", snap.Lines)
	}
}

// waitRingOutput waits until the ring's output contains want.
func waitRingOutput(t *testing.T, s *Session, want string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		var b strings.Builder
		evs, _, _ := s.Read(0, 0)
		for _, e := range evs {
			b.Write(e.Data)
		}
		if strings.Contains(b.String(), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("output %q never contained %q", b.String(), want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_ = s.Events().Wait(ctx, s.Events().LastSeq())
		cancel()
	}
}

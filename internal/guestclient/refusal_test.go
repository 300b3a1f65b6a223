package guestclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

// answerHandshake plays a guest on the far end of a pipe: it reads the handshake and
// answers one error frame with code and message.
func answerHandshake(t *testing.T, code, message string) net.Conn {
	t.Helper()
	host, guest := net.Pipe()
	t.Cleanup(func() { _ = host.Close(); _ = guest.Close() })
	go func() {
		_ = guest.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := protocol.ReadFrame(guest); err != nil {
			return
		}
		p, _ := json.Marshal(protocol.ErrorPayload{Code: code, Message: message})
		_ = protocol.WriteFrame(guest, &protocol.Frame{Header: protocol.Header{Type: protocol.FrameError}, Payload: p})
	}()
	return host
}

// TestGuestRefusalIsMarkedNotTyped: the guest's refusal arrives as the tree's one refusal
// type, marked ErrGuestRefused; GuestCode tells it from the broker's refusal and from a
// node refusal mapped from it; a code outside the closed vocabulary is a protocol
// violation, never a refusal code the node would report.
func TestGuestRefusalIsMarkedNotTyped(t *testing.T) {
	_, err := Handshake(ctxT(t, 10*time.Second), answerHandshake(t, string(actuation.CodeNonceMismatch), "stale"), testBinding())
	var r *actuation.Refusal
	if !errors.As(err, &r) || r.Code != actuation.CodeNonceMismatch || r.Message != "stale" {
		t.Fatalf("guest refusal = %#v (%v), want *actuation.Refusal nonce-mismatch", r, err)
	}
	if !errors.Is(err, ErrGuestRefused) || GuestCode(err) != actuation.CodeNonceMismatch || actuation.CodeOf(err) != actuation.CodeNonceMismatch {
		t.Fatalf("guest refusal not marked: GuestCode %q, CodeOf %q: %v", GuestCode(err), actuation.CodeOf(err), err)
	}
	if got := GuestCode(fmt.Errorf("guest of environment e: %w", err)); got != actuation.CodeNonceMismatch {
		t.Fatalf("GuestCode through a wrap = %q", got)
	}

	broker := actuation.Refusef(actuation.CodeVMNotRunning, "no VM runs")
	if got := GuestCode(broker); got != "" {
		t.Fatalf("GuestCode(broker refusal) = %q, want empty", got)
	}
	mapped := actuation.Wrapf(actuation.CodeEnvironmentUnavailable, err, "the environment's guest did not complete the file operation")
	if got := GuestCode(mapped); got != "" || !errors.Is(mapped, ErrGuestRefused) {
		t.Fatalf("GuestCode(node refusal mapped from a guest one) = %q, want empty", got)
	}
	if got := GuestCode(errors.New("plain")); got != "" {
		t.Fatalf("GuestCode(plain) = %q", got)
	}

	_, err = Handshake(ctxT(t, 10*time.Second), answerHandshake(t, "made-up-code", "x"), testBinding())
	if !errors.Is(err, ErrProtocol) || actuation.CodeOf(err) != "" {
		t.Fatalf("a code outside the vocabulary = %v (code %q), want a protocol violation without a code", err, actuation.CodeOf(err))
	}

	// A refusal of the protocol's rules made here (the own binding) is marked too: it
	// carries the code the guest would answer.
	bad := testBinding()
	bad.GuestCID = 1
	_, err = Handshake(ctxT(t, 10*time.Second), answerHandshake(t, string(actuation.CodeNonceMismatch), ""), bad)
	if GuestCode(err) != actuation.CodeBindingInvalid {
		t.Fatalf("own binding refusal: GuestCode %q: %v", GuestCode(err), err)
	}
}

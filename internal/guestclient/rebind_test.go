package guestclient

import (
	"errors"
	"syscall"
	"testing"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

// nextBinding is b re-bound to a claimer: another environment and plan, generation + 1, a
// fresh nonce, the same CID and image.
func nextBinding(b protocol.Binding) protocol.Binding {
	n := b
	n.EnvironmentRef = "team-a/claimer"
	n.PlanDigest = protocol.DigestOf([]byte("claimer plan"))
	n.SourceGeneration = b.SourceGeneration + 1
	n.BootNonce = newNonce()
	return n
}

// TestRebindRulesEnforcedByGuest sends rebinds the client would refuse locally, raw: the
// guest refuses each with the rule's code and keeps its binding and the channel.
func TestRebindRulesEnforcedByGuest(t *testing.T) {
	g := startGuest(t)
	r := g.raw(t, true)
	seq := uint64(0)
	for _, tc := range []struct {
		code string
		mut  func(b *protocol.Binding)
	}{
		{string(actuation.CodeNonceMismatch), func(b *protocol.Binding) { b.BootNonce = g.binding.BootNonce }},
		{string(actuation.CodeGenerationMismatch), func(b *protocol.Binding) { b.SourceGeneration = g.binding.SourceGeneration }},
		{string(actuation.CodeGenerationMismatch), func(b *protocol.Binding) { b.SourceGeneration = g.binding.SourceGeneration - 1 }},
		{string(actuation.CodeCIDMismatch), func(b *protocol.Binding) { b.GuestCID = 9 }},
		{string(actuation.CodeImageDigestMismatch), func(b *protocol.Binding) { b.ImageDigest = protocol.DigestOf([]byte("other")) }},
		{string(actuation.CodeBindingInvalid), func(b *protocol.Binding) { b.BootNonce = "00" }},
	} {
		n := nextBinding(g.binding)
		tc.mut(&n)
		seq++
		r.request(seq, 5000, 0, protocol.OpRebind, protocol.RebindArgs{Binding: n})
		if res := r.result(); res.Outcome != protocol.OutcomeRefused || res.Code != tc.code {
			t.Fatalf("rebind %+v: %+v, want refused %s", n, res, tc.code)
		}
		// The client refuses the same locally, with the same code, sending nothing.
		c := g.client(t)
		_, err := c.Rebind(ctxT(t, 5*time.Second), "", n)
		wantRefusal(t, err, tc.code)
	}
	// Nothing changed: the boot binding still handshakes.
	g.client(t)
}

// TestRebindClearsAndSupersedes re-binds a guest that has a running PTY session, a
// running spawn and a staged patch: the answer counts them, the processes are gone, the
// old channel and the old nonce are refused, only the new binding handshakes, and an
// agent restarted on the same state keeps the new binding.
func TestRebindClearsAndSupersedes(t *testing.T) {
	g := startGuest(t)
	old := g.client(t)
	ctx := ctxT(t, 30*time.Second)
	pty, err := old.PTYOpen(ctx, "", protocol.PTYOpenArgs{SessionID: "member-shell", Argv: []string{"/bin/sleep", "1000"}, Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.StagePatch(ctx, "", "member.txt", []byte("the member's staged bytes")); err != nil {
		t.Fatal(err)
	}
	// A spawn in flight on a third channel, killed by the rebind.
	spawner := g.client(t)
	spawnDone := make(chan error, 1)
	go func() {
		_, err := spawner.Spawn(ctxT(t, 30*time.Second), "member-spawn", protocol.SpawnArgs{Argv: []string{"/bin/sleep", "1000"}, TimeoutMS: 25000, OutputMax: 1024})
		spawnDone <- err
	}()
	waitProcs(t, old, 1)

	next := nextBinding(g.binding)
	c := g.client(t)
	d, err := c.Rebind(ctx, "", next)
	if err != nil {
		t.Fatal(err)
	}
	if d.SessionsClosed != 1 || d.ProcessesKilled != 1 || d.StagesDropped != 1 || d.BootID != c.Ack().BootID {
		t.Fatalf("rebind answered %+v", d)
	}
	if err := syscall.Kill(pty.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the member's PTY process %d survived the rebind: %v", pty.Pid, err)
	}
	select {
	case <-spawnDone: // killed: the result reports a signal (or the channel is superseded)
	case <-time.After(20 * time.Second):
		t.Fatal("the member's spawn still runs after the rebind")
	}
	// The rebinding channel is closed; the other old channel is superseded.
	if _, err := c.Inspect(ctxT(t, 5*time.Second), ""); err == nil {
		t.Fatal("the rebinding channel still serves")
	}
	_, err = old.Inspect(ctxT(t, 5*time.Second), "")
	wantRefusal(t, err, string(actuation.CodeNonceMismatch))
	// The old binding is refused (at its first differing field), and so is the old nonce
	// under the new binding's other fields; the new binding handshakes.
	refusedOld := func() {
		t.Helper()
		_, err := Connect(ctxT(t, 5*time.Second), g.ep, g.binding)
		wantRefusal(t, err, string(actuation.CodeEnvironmentMismatch))
		oldNonce := next
		oldNonce.BootNonce = g.binding.BootNonce
		_, err = Connect(ctxT(t, 5*time.Second), g.ep, oldNonce)
		wantRefusal(t, err, string(actuation.CodeNonceMismatch))
	}
	refusedOld()
	nc, err := Connect(ctxT(t, 5*time.Second), g.ep, next)
	if err != nil {
		t.Fatal(err)
	}
	in, err := nc.Inspect(ctxT(t, 5*time.Second), "")
	if err != nil {
		t.Fatal(err)
	}
	if in.Sessions != 0 || in.Processes != 0 || in.Stages != 0 || in.StageBytes != 0 {
		t.Fatalf("after the rebind the guest holds %+v", in)
	}
	_ = nc.Close()

	// An agent restarted (as the guest init restarts a crashed agent) keeps the rebind: the
	// boot input's binding is refused.
	g.restart(t)
	refusedOld()
	nc, err = Connect(ctxT(t, 5*time.Second), g.ep, next)
	if err != nil {
		t.Fatalf("the restarted agent lost the rebind: %v", err)
	}
	_ = nc.Close()
}

// waitProcs waits (test-only poll) until inspect counts n running spawns.
func waitProcs(t *testing.T, c *Client, n uint32) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; {
		d, err := c.Inspect(ctxT(t, 5*time.Second), "")
		if err != nil {
			t.Fatal(err)
		}
		if d.Processes == n {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("inspect counts %d processes, want %d", d.Processes, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

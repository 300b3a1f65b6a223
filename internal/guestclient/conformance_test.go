package guestclient

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/testkit"
)

// Protocol conformance against the real guest binary over the conformance-only Unix
// transport. This is protocol evidence, not VM evidence (see vm_test.go for a real boot).

func TestHandshakeAndInspect(t *testing.T) {
	g := startGuest(t)
	c := g.client(t)
	if c.Ack().Limits != protocol.WireLimits() {
		t.Fatalf("limits %+v", c.Ack().Limits)
	}
	d, err := c.Inspect(ctxT(t, 5*time.Second), "")
	if err != nil {
		t.Fatal(err)
	}
	if d.BootID != c.Ack().BootID || d.Stages != 0 || d.Quiesced {
		t.Fatalf("inspect %+v", d)
	}
}

func TestStaleNonceRefused(t *testing.T) {
	g := startGuest(t)
	stale := g.binding
	stale.BootNonce = newNonce() // a previous boot's nonce
	_, err := Connect(ctxT(t, 5*time.Second), g.ep, stale)
	wantRefusal(t, err, string(actuation.CodeNonceMismatch))
	g.client(t) // the right binding still works
}

func TestWrongGenerationRefused(t *testing.T) {
	g := startGuest(t)
	for _, tc := range []struct {
		code string
		mut  func(b *protocol.Binding)
	}{
		{string(actuation.CodeGenerationMismatch), func(b *protocol.Binding) { b.SourceGeneration-- }},
		{string(actuation.CodeGenerationMismatch), func(b *protocol.Binding) { b.SourceGeneration++ }},
		{string(actuation.CodeEnvironmentMismatch), func(b *protocol.Binding) { b.EnvironmentRef = "default/other" }},
		{string(actuation.CodePlanDigestMismatch), func(b *protocol.Binding) { b.PlanDigest = protocol.DigestOf([]byte("other")) }},
		{string(actuation.CodeImageDigestMismatch), func(b *protocol.Binding) { b.ImageDigest = protocol.DigestOf([]byte("other")) }},
		{string(actuation.CodeCIDMismatch), func(b *protocol.Binding) { b.GuestCID = 4 }},
	} {
		b := g.binding
		tc.mut(&b)
		_, err := Connect(ctxT(t, 5*time.Second), g.ep, b)
		wantRefusal(t, err, tc.code)
	}
}

// No operation is dispatched before a handshake: a request as first frame is refused and
// its effect does not happen.
func TestRequestBeforeHandshakeRefused(t *testing.T) {
	g := startGuest(t)
	r := g.raw(t, false)
	r.request(1, 5000, 0, protocol.OpSpawn, protocol.SpawnArgs{Argv: []string{"/bin/sh", "-c", "echo x > pwned"}, TimeoutMS: 1000})
	r.expectError(string(actuation.CodeHandshakeRequired))
	if _, err := os.Stat(filepath.Join(g.root, "pwned")); !os.IsNotExist(err) {
		t.Fatalf("request ran before the handshake: %v", err)
	}
}

func TestReplayedSequenceRefused(t *testing.T) {
	g := startGuest(t)
	for _, second := range []uint64{5, 4} { // replayed, lower
		r := g.raw(t, true)
		r.request(5, 5000, 0, protocol.OpInspect, protocol.Empty{})
		if res := r.result(); res.Outcome != protocol.OutcomeSucceeded {
			t.Fatalf("first request: %+v", res)
		}
		r.request(second, 5000, 0, protocol.OpInspect, protocol.Empty{})
		r.expectError(string(actuation.CodeSequenceReplayed))
	}
	// A recorded request replayed on another connection carries the old channel id.
	r1 := g.raw(t, true)
	old := r1.channel
	r2 := g.raw(t, true)
	r2.channel = old
	r2.request(1, 5000, 0, protocol.OpInspect, protocol.Empty{})
	r2.expectError(string(actuation.CodeChannelMismatch))
}

func TestOversizedFrameRefused(t *testing.T) {
	g := startGuest(t)
	r := g.raw(t, true)
	var hb [protocol.HeaderSize]byte
	protocol.MarshalHeader(hb[:], &protocol.Header{Type: protocol.FrameRequest, Seq: 1, DeadlineMS: 1000, Length: protocol.MaxPayload + 1})
	if _, err := r.c.Write(hb[:]); err != nil {
		t.Fatal(err)
	}
	r.expectError(string(actuation.CodeFrameTooLarge))
}

func TestOversizedTransferRefused(t *testing.T) {
	g := startGuest(t)
	t.Run("declared-bytes", func(t *testing.T) {
		r := g.raw(t, true)
		args := protocol.StageArgs{Target: "big", Content: protocol.Bulk{Bytes: protocol.MaxTransfer + 1, Digest: protocol.DigestOf(nil)}}
		r.request(1, 5000, protocol.MaxChunks, protocol.OpPatchStage, args)
		r.expectError(string(actuation.CodeTransferTooLarge))
	})
	t.Run("chunk-count", func(t *testing.T) {
		r := g.raw(t, true)
		var hb [protocol.HeaderSize]byte
		protocol.MarshalHeader(hb[:], &protocol.Header{Type: protocol.FrameRequest, Seq: 1, DeadlineMS: 1000, Length: 2, Count: protocol.MaxChunks + 1})
		_, _ = r.c.Write(hb[:]) // a lost write shows as the missing refusal
		r.expectError(string(actuation.CodeTooManyChunks))
	})
	t.Run("more-bytes-than-declared", func(t *testing.T) {
		r := g.raw(t, true)
		content := []byte("0123456789")
		args := protocol.StageArgs{Target: "f", Content: protocol.Bulk{Bytes: 5, Digest: protocol.DigestOf(content[:5])}}
		r.request(1, 5000, 1, protocol.OpPatchStage, args)
		r.write(protocol.Frame{Header: protocol.Header{Type: protocol.FrameChunk, Seq: 1, Count: 1}, Payload: content})
		r.expectError(string(actuation.CodeTransferMismatch))
	})
	t.Run("client-local", func(t *testing.T) {
		c := g.client(t)
		_, err := c.StagePatch(ctxT(t, 5*time.Second), "", "big", make([]byte, protocol.MaxStageBytes+1))
		wantRefusal(t, err, string(actuation.CodeTransferTooLarge))
	})
	t.Run("stage-caps", func(t *testing.T) {
		c := g.client(t)
		ctx := ctxT(t, 60*time.Second)
		big := bytes.Repeat([]byte{'a'}, 40<<20)
		if _, err := c.StagePatch(ctx, "", "big1", big); err != nil {
			t.Fatal(err)
		}
		// 80 MiB in total would exceed the 64 MiB stage budget: refused after the upload
		// was drained, and the channel stays usable.
		_, err := c.StagePatch(ctx, "", "big2", big)
		wantRefusal(t, err, string(actuation.CodeStageCapReached))
		for i := 0; i < protocol.MaxStages-1; i++ {
			if _, err := c.StagePatch(ctx, "", "small", []byte{byte(i)}); err != nil {
				t.Fatalf("stage %d: %v", i, err)
			}
		}
		_, err = c.StagePatch(ctx, "", "small", []byte("one too many"))
		wantRefusal(t, err, string(actuation.CodeStageCapReached))
		d, err := c.Inspect(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if d.Stages != protocol.MaxStages {
			t.Fatalf("stages %d", d.Stages)
		}
	})
}

func stageFiles(t *testing.T, g *guest) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(g.state, "stages"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// publishedStages are the stage files renamed into place (not the ".tmp-" files of
// uploads in flight).
func publishedStages(t *testing.T, g *guest) []string {
	t.Helper()
	var names []string
	for _, n := range stageFiles(t, g) {
		if !strings.HasPrefix(n, ".tmp-") {
			names = append(names, n)
		}
	}
	return names
}

// waitNoStageFiles polls (test-only) until the guest has cleaned up after a dropped
// upload: the guest notices the disconnect asynchronously.
func waitNoStageFiles(t *testing.T, g *guest) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; {
		names := stageFiles(t, g)
		if len(names) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("stage dir holds %v after a partial transfer", names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPartialTransferPublishesNothing(t *testing.T) {
	g := startGuest(t)
	content := bytes.Repeat([]byte("x"), 3*protocol.MaxPayload)
	args := protocol.StageArgs{Target: "f.txt", Content: protocol.Bulk{Bytes: uint64(len(content)), Digest: protocol.DigestOf(content)}}

	t.Run("disconnect", func(t *testing.T) {
		r := g.raw(t, true)
		r.request(1, 5000, 3, protocol.OpPatchStage, args)
		for i := uint32(0); i < 2; i++ {
			r.write(protocol.Frame{Header: protocol.Header{Type: protocol.FrameChunk, Seq: 1, Index: i, Count: 3}, Payload: content[int(i)*protocol.MaxPayload : int(i+1)*protocol.MaxPayload]})
		}
		_ = r.c.Close()
		waitNoStageFiles(t, g)
	})
	t.Run("digest-mismatch", func(t *testing.T) {
		r := g.raw(t, true)
		bad := args
		bad.Content.Digest = protocol.DigestOf([]byte("something else"))
		r.request(1, 5000, 3, protocol.OpPatchStage, bad)
		if err := protocol.WriteTransfer(r.c, 1, content); err != nil {
			t.Fatal(err)
		}
		r.expectError(string(actuation.CodeDigestMismatch))
		waitNoStageFiles(t, g)
	})
	c := g.client(t)
	d, err := c.Inspect(ctxT(t, 5*time.Second), "")
	if err != nil {
		t.Fatal(err)
	}
	if d.Stages != 0 || d.StageBytes != 0 {
		t.Fatalf("partial transfers published %d stages / %d bytes", d.Stages, d.StageBytes)
	}
}

func TestPatchStageReplayAfterLostReceipt(t *testing.T) {
	g := startGuest(t)
	content := []byte("package main\n\nfunc main() {}\n")
	args := protocol.StageArgs{Target: "src/main.go", Content: protocol.Bulk{Bytes: uint64(len(content)), Digest: protocol.DigestOf(content)}}
	want := protocol.StageRef(args.Target, args.Content.Bytes, args.Content.Digest)

	// The upload completes but the host never reads the receipt.
	r := g.raw(t, true)
	r.request(1, 5000, 1, protocol.OpPatchStage, args)
	if err := protocol.WriteTransfer(r.c, 1, content); err != nil {
		t.Fatal(err)
	}
	// Wait (test-only) until the guest published the stage (renamed into place: the temp
	// file of an upload in flight does not count), then drop the connection unread.
	for end := time.Now().Add(5 * time.Second); len(publishedStages(t, g)) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("stage not committed")
		}
	}
	_ = r.c.Close()

	c := g.client(t)
	ctx := ctxT(t, 10*time.Second)
	d, err := c.StagePatch(ctx, "", args.Target, content)
	if err != nil {
		t.Fatal(err)
	}
	if d.Ref != want || !d.Replayed || d.Stages != 1 || d.StageBytes != uint64(len(content)) {
		t.Fatalf("replay answered %+v, want ref %s replayed", d, want)
	}
	// Staging never touched the target.
	if _, err := os.Stat(filepath.Join(g.root, "src")); !os.IsNotExist(err) {
		t.Fatalf("staging mutated the root: %v", err)
	}

	// Apply: the parent must exist; base absent creates the file atomically.
	must(t, os.Mkdir(filepath.Join(g.root, "src"), 0o755))
	ad, err := c.ApplyPatch(ctx, "", protocol.ApplyArgs{Ref: d.Ref, Target: args.Target, Base: protocol.BaseAbsent})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(g.root, "src/main.go"))
	if !bytes.Equal(got, content) || ad.Digest != args.Content.Digest {
		t.Fatalf("applied %q", got)
	}
	// A second apply with base absent is a base mismatch; with the right base it succeeds.
	_, err = c.ApplyPatch(ctx, "", protocol.ApplyArgs{Ref: d.Ref, Target: args.Target, Base: protocol.BaseAbsent})
	wantRefusal(t, err, string(actuation.CodeBaseMismatch))
	if _, err := c.ApplyPatch(ctx, "", protocol.ApplyArgs{Ref: d.Ref, Target: args.Target, Base: args.Content.Digest}); err != nil {
		t.Fatal(err)
	}
	// The ref binds its target: it cannot be applied elsewhere.
	_, err = c.ApplyPatch(ctx, "", protocol.ApplyArgs{Ref: d.Ref, Target: "src/other.go", Base: protocol.BaseAbsent})
	wantRefusal(t, err, string(actuation.CodeStageUnknown))
}

func TestDeadlineNotExtended(t *testing.T) {
	g := startGuest(t)
	c := g.client(t)

	t.Run("timeout-above-deadline", func(t *testing.T) {
		_, err := c.Spawn(ctxT(t, time.Second), "", protocol.SpawnArgs{Argv: []string{"/bin/sleep", "5"}, TimeoutMS: 60000, OutputMax: 10})
		wantRefusal(t, err, string(actuation.CodeTimeoutAboveDeadline))
		// The guest refuses it too (raw, bypassing the client's own check).
		r := g.raw(t, true)
		r.request(1, 1000, 0, protocol.OpSpawn, protocol.SpawnArgs{Argv: []string{"/bin/sleep", "5"}, TimeoutMS: 60000})
		if res := r.result(); res.Code != string(actuation.CodeTimeoutAboveDeadline) {
			t.Fatalf("guest answered %+v", res)
		}
	})
	t.Run("spawn-killed-at-deadline", func(t *testing.T) {
		start := time.Now()
		res, err := c.Spawn(ctxT(t, 1500*time.Millisecond), "", protocol.SpawnArgs{Argv: []string{"/bin/sleep", "30"}, TimeoutMS: 1400, OutputMax: 10})
		if err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); !res.TimedOut || res.Signal != "SIGKILL" || el > 3*time.Second {
			t.Fatalf("after %v: %+v", el, res.SpawnData)
		}
	})
	t.Run("pty-read-wait-clipped", func(t *testing.T) {
		if _, err := c.PTYOpen(ctxT(t, 5*time.Second), "", protocol.PTYOpenArgs{SessionID: "quiet", Argv: []string{"/bin/sleep", "30"}, Rows: 24, Cols: 80}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, _, err := c.PTYRead(ctxT(t, 300*time.Millisecond), "", protocol.PTYReadArgs{SessionID: "quiet", Max: 100, WaitMS: 20000})
		if err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("a 20s wait under a 300ms deadline took %v", el)
		}
		if err := c.PTYClose(ctxT(t, 5*time.Second), "", "quiet"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("upload-trickle", func(t *testing.T) {
		r := g.raw(t, true)
		content := bytes.Repeat([]byte("y"), 2*protocol.MaxPayload)
		args := protocol.StageArgs{Target: "slow", Content: protocol.Bulk{Bytes: uint64(len(content)), Digest: protocol.DigestOf(content)}}
		r.request(1, 300, 2, protocol.OpPatchStage, args)
		r.write(protocol.Frame{Header: protocol.Header{Type: protocol.FrameChunk, Seq: 1, Count: 2}, Payload: content[:protocol.MaxPayload]})
		time.Sleep(800 * time.Millisecond) // past the 300ms deadline
		// The guest has already refused and closed: this write may fail (broken pipe).
		_ = protocol.WriteFrame(r.c, &protocol.Frame{Header: protocol.Header{Type: protocol.FrameChunk, Seq: 1, Index: 1, Count: 2}, Payload: content[protocol.MaxPayload:]})
		r.expectError(string(actuation.CodeDeadlineExceeded))
		waitNoStageFiles(t, g)
	})
}

func TestMalformedRequestRefusedBeforeDispatch(t *testing.T) {
	g := startGuest(t)
	effect := func() bool {
		_, err := os.Stat(filepath.Join(g.root, "ran"))
		return err == nil
	}
	spawn := protocol.SpawnArgs{Argv: []string{"/bin/sh", "-c", "echo > ran"}, TimeoutMS: 1000, OutputMax: 10}
	cases := []struct {
		name string
		code string
		send func(r *raw)
	}{
		{"unknown-field", string(actuation.CodeMalformedPayload), func(r *raw) {
			args := map[string]any{"argv": spawn.Argv, "timeoutMS": 1000, "outputMax": 10, "privileged": true}
			r.request(1, 5000, 0, protocol.OpSpawn, args)
		}},
		{"wrong-type", string(actuation.CodeMalformedPayload), func(r *raw) {
			r.request(1, 5000, 0, protocol.OpSpawn, map[string]any{"argv": "/bin/sh -c 'echo > ran'", "timeoutMS": 1000})
		}},
		{"unknown-op", string(actuation.CodeUnknownOperation), func(r *raw) { r.request(1, 5000, 0, "exec", spawn) }},
		{"bad-opid", string(actuation.CodeMalformedPayload), func(r *raw) {
			a, _ := jsonMarshal(spawn)
			p, _ := jsonMarshal(protocol.Request{Op: protocol.OpSpawn, OpID: "../x", Channel: r.channel, Args: a})
			r.write(protocol.Frame{Header: protocol.Header{Type: protocol.FrameRequest, Seq: 1, DeadlineMS: 5000}, Payload: p})
		}},
		{"no-deadline", string(actuation.CodeDeadlineMissing), func(r *raw) {
			a, _ := jsonMarshal(spawn)
			p, _ := jsonMarshal(protocol.Request{Op: protocol.OpSpawn, OpID: "x", Channel: r.channel, Args: a})
			var hb [protocol.HeaderSize]byte
			h := protocol.Header{Type: protocol.FrameRequest, Seq: 1, Length: uint32(len(p)), Digest: sha(p)}
			protocol.MarshalHeader(hb[:], &h)
			_, _ = r.c.Write(append(hb[:], p...)) // a lost write shows as the missing refusal
		}},
		{"bad-digest", string(actuation.CodeDigestMismatch), func(r *raw) {
			a, _ := jsonMarshal(spawn)
			p, _ := jsonMarshal(protocol.Request{Op: protocol.OpSpawn, OpID: "x", Channel: r.channel, Args: a})
			var hb [protocol.HeaderSize]byte
			h := protocol.Header{Type: protocol.FrameRequest, Seq: 1, DeadlineMS: 5000, Length: uint32(len(p)), Digest: sha([]byte("other"))}
			protocol.MarshalHeader(hb[:], &h)
			_, _ = r.c.Write(append(hb[:], p...)) // a lost write shows as the missing refusal
		}},
		{"chunks-on-spawn", string(actuation.CodeTransferMismatch), func(r *raw) { r.request(1, 5000, 1, protocol.OpSpawn, spawn) }},
		{"trailing-json", string(actuation.CodeMalformedPayload), func(r *raw) {
			a, _ := jsonMarshal(spawn)
			p, _ := jsonMarshal(protocol.Request{Op: protocol.OpSpawn, OpID: "x", Channel: r.channel, Args: a})
			p = append(p, []byte(` {"op":"spawn"}`)...)
			r.write(protocol.Frame{Header: protocol.Header{Type: protocol.FrameRequest, Seq: 1, DeadlineMS: 5000}, Payload: p})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := g.raw(t, true)
			tc.send(r)
			r.expectError(tc.code)
			if effect() {
				t.Fatal("a malformed request was dispatched")
			}
		})
	}
	// Pre-dispatch admission refusals of well-formed requests keep the channel.
	c := g.client(t)
	_, _, err := c.do(ctxT(t, 5*time.Second), call{op: protocol.OpSpawn, args: protocol.SpawnArgs{Argv: []string{"sh"}, TimeoutMS: 1000}, bulkLimit: 1})
	wantRefusal(t, err, string(actuation.CodeInvalidSpec))
	if _, err := c.Inspect(ctxT(t, 5*time.Second), ""); err != nil {
		t.Fatalf("channel unusable after an admission refusal: %v", err)
	}
	if effect() {
		t.Fatal("a refused request was dispatched")
	}
}

func TestSpawnOutputCap(t *testing.T) {
	g := startGuest(t)
	c := g.client(t)
	ctx := ctxT(t, 10*time.Second)
	res, err := c.Spawn(ctx, "", protocol.SpawnArgs{
		Argv:      []string{"/bin/sh", "-c", "head -c 5000 /dev/zero; head -c 5000 /dev/zero >&2; exit 3"},
		Env:       []string{"PATH=/usr/bin:/bin"},
		TimeoutMS: 5000, OutputMax: 6000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || !res.Truncated || len(res.Stdout)+len(res.Stderr) != 6000 || len(res.Stdout) != 5000 {
		t.Fatalf("one budget for both streams: exit %d truncated %v stdout %d stderr %d", res.ExitCode, res.Truncated, len(res.Stdout), len(res.Stderr))
	}
	// The environment is exactly the one given; the working directory is beneath the root.
	must(t, os.MkdirAll(filepath.Join(g.root, "sub"), 0o755))
	res, err = c.Spawn(ctx, "", protocol.SpawnArgs{Argv: []string{"/bin/sh", "-c", "pwd; env | sort"}, Env: []string{"A=1"}, Cwd: "sub", TimeoutMS: 5000, OutputMax: 4096})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if lines[0] != filepath.Join(g.root, "sub") || !contains(lines, "A=1") || contains(lines, "HOME="+os.Getenv("HOME")) && os.Getenv("HOME") != "" {
		t.Fatalf("pwd/env: %q", lines)
	}
	_, err = c.Spawn(ctx, "", protocol.SpawnArgs{Argv: []string{"/bin/true"}, Cwd: "../", TimeoutMS: 1000})
	wantRefusal(t, err, string(actuation.CodePathTraversal))
	_, err = c.Spawn(ctx, "", protocol.SpawnArgs{Argv: []string{"/nonexistent"}, TimeoutMS: 1000})
	wantRefusal(t, err, string(actuation.CodeExecFailed))
	_, err = c.Spawn(ctx, "", protocol.SpawnArgs{Argv: []string{"/bin/true"}, TimeoutMS: 1000, OutputMax: protocol.MaxOutputBytes + 1})
	wantRefusal(t, err, string(actuation.CodeOutputCapAboveMax))
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

func TestSignalRunningSpawn(t *testing.T) {
	g := startGuest(t)
	c1, c2 := g.client(t), g.client(t)
	done := make(chan *SpawnResult, 1)
	go func() {
		res, err := c1.Spawn(ctxT(t, 20*time.Second), "sleeper", protocol.SpawnArgs{Argv: []string{"/bin/sleep", "30"}, TimeoutMS: 15000, OutputMax: 10})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := c2.Signal(ctxT(t, 5*time.Second), "", "sleeper", "SIGTERM")
		if err == nil {
			break
		}
		if string(GuestCode(err)) != string(actuation.CodeSessionUnknown) || time.Now().After(end) {
			t.Fatal(err)
		}
	}
	res := <-done
	if res == nil || res.Signal != "SIGTERM" || res.TimedOut {
		t.Fatalf("%+v", res)
	}
	wantRefusal(t, c2.Signal(ctxT(t, 5*time.Second), "", "sleeper", "SIGTERM"), string(actuation.CodeSessionUnknown))
}

func TestPTYEcho(t *testing.T) {
	g := startGuest(t)
	c := g.client(t)
	ctx := ctxT(t, 20*time.Second)
	if _, err := c.PTYOpen(ctx, "", protocol.PTYOpenArgs{SessionID: "s1", Argv: []string{"/bin/cat"}, Rows: 24, Cols: 80}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PTYInput(ctx, "", "s1", []byte("hello-pty\n")); err != nil {
		t.Fatal(err)
	}
	var out []byte
	off := uint64(0)
	for !bytes.Contains(out, []byte("hello-pty\r\nhello-pty\r\n")) {
		d, b, err := c.PTYRead(ctx, "", protocol.PTYReadArgs{SessionID: "s1", Offset: off, Max: 4096, WaitMS: 2000})
		if err != nil {
			t.Fatal(err)
		}
		out, off = append(out, b...), d.Next
		if d.Exited {
			t.Fatalf("exited early: %q", out)
		}
	}
	// Re-reading from 0 returns the same bytes (offset-addressed output survives a lost response).
	_, again, err := c.PTYRead(ctx, "", protocol.PTYReadArgs{SessionID: "s1", Max: 4096})
	if err != nil || !bytes.Equal(again, out) {
		t.Fatalf("re-read %q (%v)", again, err)
	}
	if err := c.PTYResize(ctx, "", "s1", 40, 120); err != nil {
		t.Fatal(err)
	}
	// The size is visible to a process on the terminal (no stty needed by the guest).
	if _, err := c.PTYOpen(ctx, "", protocol.PTYOpenArgs{SessionID: "s2", Argv: []string{"/bin/sh", "-c", "stty size 2>/dev/null || echo nostty"}, Env: []string{"PATH=/usr/bin:/bin"}, Rows: 33, Cols: 99}); err != nil {
		t.Fatal(err)
	}
	var o2 []byte
	off = 0
	for {
		d, b, err := c.PTYRead(ctx, "", protocol.PTYReadArgs{SessionID: "s2", Offset: off, Max: 4096, WaitMS: 2000})
		if err != nil {
			t.Fatal(err)
		}
		o2, off = append(o2, b...), d.Next
		if d.Exited {
			break
		}
	}
	if s := string(o2); !strings.Contains(s, "33 99") && !strings.Contains(s, "nostty") {
		t.Fatalf("stty size: %q", s)
	}
	if err := c.Signal(ctx, "", "s1", "SIGINT"); err != nil {
		t.Fatal(err)
	}
	for {
		d, _, err := c.PTYRead(ctx, "", protocol.PTYReadArgs{SessionID: "s1", Offset: off, Max: 4096, WaitMS: 2000})
		if err != nil {
			t.Fatal(err)
		}
		off = d.Next
		if d.Exited {
			if d.Signal != "SIGINT" {
				t.Fatalf("exit %+v", d)
			}
			break
		}
	}
	for _, s := range []string{"s1", "s2"} {
		if err := c.PTYClose(ctx, "", s); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.PTYInput(ctx, "", "s1", []byte("x"))
	wantRefusal(t, err, string(actuation.CodeSessionUnknown))
}

func TestFileReadRefusesTraversal(t *testing.T) {
	g := startGuest(t)
	c := g.client(t)
	ctx := ctxT(t, 10*time.Second)
	must(t, os.WriteFile(filepath.Join(g.root, "hello.txt"), []byte("hello world"), 0o644))
	must(t, os.Symlink("/etc/passwd", filepath.Join(g.root, "abs-link")))
	must(t, os.Symlink("../../../../../../etc/passwd", filepath.Join(g.root, "rel-link")))
	must(t, os.Symlink("/etc", filepath.Join(g.root, "dir-link")))
	must(t, os.Symlink("hello.txt", filepath.Join(g.root, "inner-link")))

	d, b, err := c.ReadFile(ctx, "", protocol.ReadArgs{Path: "hello.txt", Offset: 6, Max: 3})
	if err != nil || string(b) != "wor" || d.Size != 11 || d.EOF {
		t.Fatalf("read %q %+v %v", b, d, err)
	}
	if _, b, err := c.ReadFile(ctx, "", protocol.ReadArgs{Path: "inner-link", Max: 100}); err != nil || string(b) != "hello world" {
		t.Fatalf("a link that stays beneath the root: %q %v", b, err)
	}
	for _, p := range []string{"abs-link", "rel-link", "dir-link/passwd"} {
		_, _, err := c.ReadFile(ctx, "", protocol.ReadArgs{Path: p, Max: 100})
		wantRefusal(t, err, string(actuation.CodeSymlinkEscape))
	}
	// Lexical traversal is refused by the client's own check and, sent raw, by the guest.
	_, _, err = c.ReadFile(ctx, "", protocol.ReadArgs{Path: "../etc/passwd", Max: 100})
	wantRefusal(t, err, string(actuation.CodePathTraversal))
	for p, code := range map[string]actuation.Code{"../etc/passwd": actuation.CodePathTraversal, "/etc/passwd": actuation.CodePathAbsolute, "a/../../etc/passwd": actuation.CodePathTraversal} {
		_, _, err := c.do(ctx, call{op: protocol.OpFileRead, args: protocol.ReadArgs{Path: p, Max: 100}, bulkLimit: 100})
		wantRefusal(t, err, string(code))
	}
	_, _, err = c.ReadFile(ctx, "", protocol.ReadArgs{Path: "missing", Max: 100})
	wantRefusal(t, err, string(actuation.CodeNotFound))
	must(t, os.Mkdir(filepath.Join(g.root, "d"), 0o755))
	_, _, err = c.ReadFile(ctx, "", protocol.ReadArgs{Path: "d", Max: 100})
	wantRefusal(t, err, string(actuation.CodeNotRegularFile))
}

func TestSnapshotAndExport(t *testing.T) {
	g := startGuest(t)
	c := g.client(t)
	ctx := ctxT(t, 10*time.Second)
	must(t, os.MkdirAll(filepath.Join(g.root, "a/b"), 0o755))
	must(t, os.WriteFile(filepath.Join(g.root, "a/b/f.txt"), []byte("content"), 0o644))
	must(t, os.Symlink("/etc", filepath.Join(g.root, "a/link")))
	s, err := c.Snapshot(ctx, "", protocol.SnapshotArgs{MaxEntries: 100, HashMax: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range s.Entries {
		paths = append(paths, e.Type+":"+e.Path)
		if e.Path == "a/b/f.txt" && e.Digest != protocol.DigestOf([]byte("content")) {
			t.Fatalf("digest %s", e.Digest)
		}
		if e.Path == "a/link" && e.Link != "/etc" {
			t.Fatalf("link %q", e.Link)
		}
	}
	if strings.Join(paths, " ") != "dir:a dir:a/b file:a/b/f.txt symlink:a/link" {
		t.Fatalf("snapshot %v", paths)
	}
	s, err = c.Snapshot(ctx, "", protocol.SnapshotArgs{MaxEntries: 2})
	if err != nil || !s.Truncated || len(s.Entries) != 2 {
		t.Fatalf("bounded snapshot: %+v %v", s, err)
	}

	d, tarball, err := c.Export(ctx, "", protocol.ExportArgs{Path: "a", MaxBytes: 1 << 20, MaxEntries: 10})
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(tarball))
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "b/f.txt" {
			b, _ := io.ReadAll(tr)
			if string(b) != "content" {
				t.Fatalf("exported %q", b)
			}
		}
	}
	if d.Entries != 3 || strings.Join(names, " ") != "b/ b/f.txt link" {
		t.Fatalf("export %d %v", d.Entries, names)
	}
	must(t, os.WriteFile(filepath.Join(g.root, "a/big"), make([]byte, 8192), 0o644))
	_, _, err = c.Export(ctx, "", protocol.ExportArgs{Path: "a", MaxBytes: 4096, MaxEntries: 10})
	wantRefusal(t, err, string(actuation.CodeTooLarge))
	_, _, err = c.Export(ctx, "", protocol.ExportArgs{Path: "a", MaxBytes: 1 << 20, MaxEntries: 2})
	wantRefusal(t, err, string(actuation.CodeTooLarge))
}

func TestQuiesceAndShutdown(t *testing.T) {
	g := startGuest(t)
	c := g.client(t)
	ctx := ctxT(t, 10*time.Second)
	if _, err := c.Quiesce(ctx, ""); err != nil {
		t.Fatal(err)
	}
	_, err := c.Spawn(ctx, "", protocol.SpawnArgs{Argv: []string{"/bin/true"}, TimeoutMS: 1000})
	wantRefusal(t, err, string(actuation.CodeQuiesced))
	if d, err := c.Inspect(ctx, ""); err != nil || !d.Quiesced {
		t.Fatalf("%+v %v", d, err)
	}
	if err := c.Shutdown(ctx, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-g.exited:
		if err != nil {
			t.Fatalf("agent exit: %v", err)
		}
		g.exited <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not exit after shutdown")
	}
}

var must = testkit.Must

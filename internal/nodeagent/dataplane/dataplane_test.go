package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

func TestKubeAuthentication(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{})
	ts.openSession(t, testNS, "s", wbv1.RawInputOperatorOnly, 0)
	screen := SessionPath(testNS, "s", "screen")
	ts.expect(t, "GET", screen, "", nil, 401, string(actuation.CodeUnauthenticated))
	ts.expect(t, "GET", screen, "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", nil, 401, string(actuation.CodeUnauthenticated))
	ts.expect(t, "GET", screen, fx.tokens["operator"], nil, 200, "")
	// Authentication precedes routing: the route is only revealed afterwards.
	ts.expect(t, "GET", "/v1/nothing-here", "", nil, 401, string(actuation.CodeUnauthenticated))
	ts.expect(t, "GET", "/v1/nothing-here", fx.tokens["operator"], nil, 404, string(actuation.CodeNotFound))
}

// TestKubeAuthorizationMatrix exercises SubjectAccessReview per virtual
// subresource with the real ClusterRoles (authorization cache off).
func TestKubeAuthorizationMatrix(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{TTL: -1})
	ts.openSession(t, testNS, "s", wbv1.RawInputOperatorOnly, 0)
	ts.openSession(t, otherNS, "s", wbv1.RawInputOperatorOnly, 0)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts.addRoot(t, testNS, "env", "work", dir)

	read := FilesPath(testNS, "env", "read") + "?root=work&path=a.txt"
	snapshot := FilesPath(testNS, "env", "snapshot") + "?root=work"
	p := func(sub string) string { return SessionPath(testNS, "s", sub) }
	in := InputRequest{Data: []byte("x")}
	size := ResizeRequest{Rows: 24, Cols: 80}
	cont := SignalRequest{Signal: "CONT"}
	for _, tc := range []struct {
		who, method, path string
		body              any
		status            int
	}{
		{"operator", "GET", p("screen"), nil, 200},
		{"operator", "GET", p("events"), nil, 200},
		{"operator", "POST", p("input"), in, 202},
		{"operator", "POST", p("resize"), size, 200},
		{"operator", "POST", p("signal"), cont, 200},
		{"operator", "GET", read, nil, 200},
		{"operator", "GET", snapshot, nil, 200},
		{"operator", "GET", SessionPath(otherNS, "s", "screen"), nil, 403}, // bound in testNS only
		{"agent", "GET", p("screen"), nil, 200},
		{"agent", "GET", p("events"), nil, 200},
		{"agent", "POST", p("input"), in, 403},
		{"agent", "POST", p("resize"), size, 403},
		{"agent", "POST", p("signal"), cont, 403},
		{"agent", "GET", read, nil, 200},
		{"agent", "GET", snapshot, nil, 200},
		{"viewer", "GET", p("screen"), nil, 200},
		{"viewer", "GET", p("events"), nil, 200},
		{"viewer", "POST", p("input"), in, 403},
		{"viewer", "GET", read, nil, 403},
		{"nobody", "GET", p("screen"), nil, 403},
		{"nobody", "GET", p("events"), nil, 403},
	} {
		t.Run(tc.who+" "+tc.method+" "+tc.path, func(t *testing.T) {
			code := ""
			if tc.status == 403 {
				code = string(actuation.CodeForbidden)
			}
			ts.expect(t, tc.method, tc.path, fx.tokens[tc.who], tc.body, tc.status, code)
		})
	}
}

// TestKubeRawInputGate: even an operator may write raw input only when the
// session's spec.rawInput is OperatorOnly.
func TestKubeRawInputGate(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{})
	ts.openSession(t, testNS, "disabled", wbv1.RawInputDisabled, 0)
	ts.openSession(t, testNS, "unset", "", 0)
	ts.openSession(t, testNS, "open", wbv1.RawInputOperatorOnly, 0)
	op := fx.tokens["operator"]
	in := InputRequest{Data: []byte("x\n")}
	ts.expect(t, "POST", SessionPath(testNS, "disabled", "input"), op, in, 403, string(actuation.CodeRawInputDisabled))
	ts.expect(t, "POST", SessionPath(testNS, "unset", "input"), op, in, 403, string(actuation.CodeRawInputDisabled))
	ts.expect(t, "POST", SessionPath(testNS, "open", "input"), op, in, 202, "")
	// The agent is refused by RBAC before the session is even looked at.
	ts.expect(t, "POST", SessionPath(testNS, "open", "input"), fx.tokens["agent"], in, 403, string(actuation.CodeForbidden))
}

// TestKubeInputEcho: the operator's input reaches /bin/cat on a real PTY and
// the agent reads the echo through the events and screen endpoints.
func TestKubeInputEcho(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{})
	s := ts.openSession(t, testNS, "echo", wbv1.RawInputOperatorOnly, 0)
	cursor := s.Events().LastSeq()
	body := ts.expect(t, "POST", SessionPath(testNS, "echo", "input"), fx.tokens["operator"], InputRequest{Data: []byte("hello data plane\n")}, 202, "")
	var ack InputResponse
	if err := json.Unmarshal(body, &ack); err != nil || ack.QueuedBytes != 17 {
		t.Fatalf("input ack %s: %v", body, err)
	}
	// The tty echoes the line and cat copies it: two occurrences.
	out, _ := ts.readOutput(t, fx.tokens["agent"], testNS, "echo", cursor, func(b []byte) bool {
		return bytes.Count(b, []byte("hello data plane")) >= 2
	})
	if !bytes.Contains(out, []byte("hello data plane\r\n")) {
		t.Errorf("output %q lacks the terminal line ending", out)
	}
	var scr ScreenResponse
	if err := json.Unmarshal(ts.expect(t, "GET", SessionPath(testNS, "echo", "screen"), fx.tokens["agent"], nil, 200, ""), &scr); err != nil {
		t.Fatal(err)
	}
	if len(scr.Lines) < 2 || scr.Lines[0] != "hello data plane" || scr.Lines[1] != "hello data plane" {
		t.Errorf("screen lines %q", scr.Lines)
	}
	if scr.Rows != 24 || scr.Cols != 80 || scr.Cursor.Row != 2 || len(scr.Digest) != 64 || scr.OutputBytes == 0 {
		t.Errorf("screen %+v", scr)
	}
}

// TestKubeLongPollWakesOnOutput parks a long-poll (observed through the
// server's wait hook, not by sleeping), then writes input: the long-poll
// returns with the new events long before its 25 s deadline.
func TestKubeLongPollWakesOnOutput(t *testing.T) {
	fx := requireAPIServer(t)
	parked := make(chan struct{}, 4)
	ts := startKubeServer(t, Limits{}, CacheOptions{}, func(s *Server) {
		s.waitHook = func() { parked <- struct{}{} }
	})
	s := ts.openSession(t, testNS, "wake", wbv1.RawInputOperatorOnly, 0)
	cursor := s.Events().LastSeq()
	type result struct {
		er      EventsResponse
		elapsed time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		status, body, err := ts.request(context.Background(), "GET",
			fmt.Sprintf("%s?cursor=%d&waitSeconds=25", SessionPath(testNS, "wake", "events"), cursor), fx.tokens["agent"], nil)
		var er EventsResponse
		if err != nil || status != 200 || json.Unmarshal(body, &er) != nil {
			t.Errorf("long-poll: status %d err %v body %s", status, err, body)
		}
		done <- result{er, time.Since(start)}
	}()
	select {
	case <-parked:
	case <-time.After(20 * time.Second):
		t.Fatal("the long-poll never parked")
	}
	ts.expect(t, "POST", SessionPath(testNS, "wake", "input"), fx.tokens["operator"], InputRequest{Data: []byte("wake\n")}, 202, "")
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the long-poll did not return")
	}
	if len(res.er.Events) == 0 || res.er.Events[0].Seq != cursor+1 || res.er.Next <= cursor {
		t.Fatalf("long-poll returned %+v after %s; want events after cursor %d", res.er, res.elapsed, cursor)
	}
	if res.elapsed >= 20*time.Second {
		t.Errorf("long-poll took %s: it ran into its deadline instead of waking", res.elapsed)
	}
	// The echo itself arrives (possibly in the next poll when the input
	// event woke the first one).
	ts.readOutput(t, fx.tokens["agent"], testNS, "wake", cursor, func(b []byte) bool { return bytes.Contains(b, []byte("wake")) })
}

// TestKubeLongPollDeadline: without output a long-poll ends at its deadline
// with no events and an unchanged cursor.
func TestKubeLongPollDeadline(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{})
	s := ts.openSession(t, testNS, "quiet", wbv1.RawInputOperatorOnly, 0)
	cursor := s.Events().LastSeq()
	start := time.Now()
	er := ts.events(t, fx.tokens["agent"], testNS, "quiet", cursor, 1)
	if elapsed := time.Since(start); elapsed < 900*time.Millisecond {
		t.Errorf("long-poll returned after %s, before its 1 s deadline", elapsed)
	}
	if len(er.Events) != 0 || er.Next != cursor || er.Gap != nil || er.Closed || er.LastSeq != cursor {
		t.Errorf("idle long-poll returned %+v", er)
	}
}

// TestKubeLongPollCap: with one long-poll slot the second concurrent
// long-poll is refused with 429 queue-full; plain reads still work.
func TestKubeLongPollCap(t *testing.T) {
	fx := requireAPIServer(t)
	parked := make(chan struct{}, 4)
	ts := startKubeServer(t, Limits{MaxLongPolls: 1}, CacheOptions{}, func(s *Server) {
		s.waitHook = func() { parked <- struct{}{} }
	})
	s := ts.openSession(t, testNS, "cap", wbv1.RawInputOperatorOnly, 0)
	cursor := s.Events().LastSeq()
	path := fmt.Sprintf("%s?cursor=%d&waitSeconds=25", SessionPath(testNS, "cap", "events"), cursor)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{})
	go func() {
		defer close(first)
		_, _, _ = ts.request(ctx, "GET", path, fx.tokens["agent"], nil)
	}()
	select {
	case <-parked:
	case <-time.After(20 * time.Second):
		t.Fatal("the first long-poll never parked")
	}
	ts.expect(t, "GET", path, fx.tokens["agent"], nil, 429, string(actuation.CodeQueueFull))
	ts.events(t, fx.tokens["agent"], testNS, "cap", cursor, 0)
	cancel()
	<-first
}

// TestKubeGapMarker: a reader whose cursor fell out of retention gets an
// explicit gap marker, and the events resume right after it.
func TestKubeGapMarker(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{})
	s := ts.openSession(t, testNS, "gap", wbv1.RawInputOperatorOnly, 8)
	rg := s.Events()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; rg.Stats().Evicted == 0; i++ {
		if i > 100 {
			t.Fatalf("no eviction after %d writes: %+v", i, rg.Stats())
		}
		last := rg.LastSeq()
		if err := s.Input([]byte("fill\n")); err != nil {
			t.Fatal(err)
		}
		if err := rg.Wait(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	er := ts.events(t, fx.tokens["agent"], testNS, "gap", 0, 0)
	if er.Gap == nil || er.Gap.FromSeq != 1 || er.Gap.ToSeq < 1 {
		t.Fatalf("no gap marker from seq 1: %+v", er)
	}
	if len(er.Events) == 0 || er.Events[0].Seq != er.Gap.ToSeq+1 {
		t.Fatalf("events do not resume after the gap %+v: %+v", er.Gap, er.Events)
	}
	after := ts.events(t, fx.tokens["agent"], testNS, "gap", er.Next, 0)
	if after.Gap != nil && after.Gap.FromSeq <= er.Next {
		// Only a concurrent eviction can produce a new gap; it must start after the old cursor.
		t.Errorf("a second gap overlaps the first read: %+v after cursor %d", after.Gap, er.Next)
	}
}

func TestKubeFiles(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{})
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside/secret.txt", filepath.Join(root, "escape-relative")); err != nil {
		t.Fatal(err)
	}
	ts.addRoot(t, testNS, "env", "work", root)
	agent := fx.tokens["agent"]
	read := func(q string) string { return FilesPath(testNS, "env", "read") + "?root=work&" + q }

	var rr ReadResponse
	if err := json.Unmarshal(ts.expect(t, "GET", read("path=hello.txt"), agent, nil, 200, ""), &rr); err != nil {
		t.Fatal(err)
	}
	if string(rr.Data) != "hello world\n" || rr.Size != 12 || !rr.EOF || rr.Digest == "" {
		t.Errorf("read: %+v", rr)
	}
	rr = ReadResponse{}
	if err := json.Unmarshal(ts.expect(t, "GET", read("path=hello.txt&offset=6&max=5"), agent, nil, 200, ""), &rr); err != nil {
		t.Fatal(err)
	}
	if string(rr.Data) != "world" || rr.EOF {
		t.Errorf("windowed read: %+v", rr)
	}
	ts.expect(t, "GET", read("path=../outside/secret.txt"), agent, nil, 400, string(actuation.CodePathTraversal))
	ts.expect(t, "GET", read("path=sub/../../outside/secret.txt"), agent, nil, 400, string(actuation.CodePathTraversal))
	ts.expect(t, "GET", read("path=escape"), agent, nil, 403, string(actuation.CodeSymlinkEscape))
	ts.expect(t, "GET", read("path=escape-relative"), agent, nil, 403, string(actuation.CodeSymlinkEscape))
	ts.expect(t, "GET", read("path=/etc/passwd"), agent, nil, 400, string(actuation.CodePathAbsolute))
	ts.expect(t, "GET", read("path="), agent, nil, 400, string(actuation.CodePathEmpty))
	ts.expect(t, "GET", read("path=missing.txt"), agent, nil, 404, string(actuation.CodePathNotFound))
	ts.expect(t, "GET", read("path=hello.txt&max=1048577"), agent, nil, 400, string(actuation.CodeReadCapAboveMax))
	ts.expect(t, "GET", read("path=hello.txt&offset=-1"), agent, nil, 400, string(actuation.CodeBadRequest))
	ts.expect(t, "GET", FilesPath(testNS, "env", "read")+"?root=other&path=hello.txt", agent, nil, 404, string(actuation.CodeNotFound))
	ts.expect(t, "GET", FilesPath(testNS, "env", "read")+"?root=Bad_Root&path=hello.txt", agent, nil, 400, string(actuation.CodeBadRequest))

	var snap fsaccess.Snapshot
	if err := json.Unmarshal(ts.expect(t, "GET", FilesPath(testNS, "env", "snapshot")+"?root=work", agent, nil, 200, ""), &snap); err != nil {
		t.Fatal(err)
	}
	types := map[string]fsaccess.EntryType{}
	for _, e := range snap.Entries {
		types[e.Path] = e.Type
	}
	if types["hello.txt"] != fsaccess.TypeFile || types["escape"] != fsaccess.TypeSymlink || snap.Truncated {
		t.Errorf("snapshot entries %v truncated=%v", types, snap.Truncated)
	}
	ts.expect(t, "GET", FilesPath(testNS, "env", "snapshot")+"?root=work&path=../outside", agent, nil, 400, string(actuation.CodePathTraversal))
}

// TestKubeResizeAndSignal: resize reaches the screen model; SIGINT ends cat,
// the events endpoint reports the exit and closes, later input is refused.
func TestKubeResizeAndSignal(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{})
	ts.openSession(t, testNS, "sig", wbv1.RawInputOperatorOnly, 0)
	op := fx.tokens["operator"]
	ts.expect(t, "POST", SessionPath(testNS, "sig", "resize"), op, ResizeRequest{Rows: 30, Cols: 100}, 200, "")
	var scr ScreenResponse
	if err := json.Unmarshal(ts.expect(t, "GET", SessionPath(testNS, "sig", "screen"), op, nil, 200, ""), &scr); err != nil {
		t.Fatal(err)
	}
	if scr.Rows != 30 || scr.Cols != 100 {
		t.Errorf("screen after resize: %dx%d", scr.Rows, scr.Cols)
	}
	ts.expect(t, "POST", SessionPath(testNS, "sig", "resize"), op, ResizeRequest{Rows: 30, Cols: 5000}, 400, string(actuation.CodeInvalidSpec))
	ts.expect(t, "POST", SessionPath(testNS, "sig", "signal"), op, SignalRequest{Signal: "SIGINT"}, 400, string(actuation.CodeBadRequest))
	ts.expect(t, "POST", SessionPath(testNS, "sig", "signal"), op, SignalRequest{Signal: "INT"}, 200, "")

	var cursor uint64
	var exit []byte
	deadline := time.Now().Add(20 * time.Second)
	for {
		er := ts.events(t, op, testNS, "sig", cursor, 10)
		for _, e := range er.Events {
			if e.Kind == ring.KindExit {
				exit = e.Data
			}
		}
		cursor = er.Next
		if er.Closed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session did not close after SIGINT; last %+v", er)
		}
	}
	if string(exit) != "signal=SIGINT" {
		t.Errorf("exit event %q, want signal=SIGINT", exit)
	}
	ts.expect(t, "POST", SessionPath(testNS, "sig", "input"), op, InputRequest{Data: []byte("x")}, 409, string(actuation.CodeSessionNotRunning))
}

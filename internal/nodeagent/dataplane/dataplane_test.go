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
	screen := sessionPath(testNS, "s", "screen")
	ts.expect(t, "GET", screen, "", nil, 401, string(actuation.CodeUnauthenticated))
	ts.expect(t, "GET", screen, "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", nil, 401, string(actuation.CodeUnauthenticated))
	ts.expect(t, "GET", screen, fx.tokens["operator"], nil, 200, "")
	// Authentication precedes routing: the route is only revealed afterwards.
	ts.expect(t, "GET", "/v2/nothing-here", "", nil, 401, string(actuation.CodeUnauthenticated))
	ts.expect(t, "GET", "/v2/nothing-here", fx.tokens["operator"], nil, 404, string(actuation.CodeNotFound))
	// The v1 routes are gone: a v1 path is an unknown route.
	ts.expect(t, "GET", "/v1/namespaces/"+testNS+"/terminalsessions/s/screen", fx.tokens["operator"], nil, 404, string(actuation.CodeNotFound))
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

	read := filesPath(testNS, "env") + "?op=read&root=work&path=a.txt"
	snapshot := filesPath(testNS, "env") + "?root=work"
	p := func(sub string) string { return sessionPath(testNS, "s", sub) }
	size := ResizeRequest{Rows: 24, Cols: 80}
	cont := SignalRequest{Signal: "SIGCONT"}
	for _, tc := range []struct {
		who, method, path string
		body              any
		status            int
	}{
		{"operator", "GET", p("screen"), nil, 200},
		{"operator", "GET", p("events"), nil, 200},
		{"operator", "POST", p("resize"), size, 200},
		{"operator", "POST", p("signal"), cont, 200},
		{"operator", "GET", read, nil, 200},
		{"operator", "GET", snapshot, nil, 200},
		{"operator", "GET", sessionPath(otherNS, "s", "screen"), nil, 403}, // bound in testNS only
		{"agent", "GET", p("screen"), nil, 200},
		{"agent", "GET", p("events"), nil, 200},
		{"agent", "POST", p("resize"), size, 403},
		{"agent", "POST", p("signal"), cont, 403},
		{"agent", "GET", read, nil, 200},
		{"agent", "GET", snapshot, nil, 200},
		{"viewer", "GET", p("screen"), nil, 200},
		{"viewer", "GET", p("events"), nil, 403},
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
	// Input is an attach with stdin (create terminalsessions/attach): the operator's is
	// served, everyone else's refused before the handshake.
	ts.attach(t, fx.tokens["operator"], testNS, "s", true)
	ts.attach(t, fx.tokens["agent"], testNS, "s", false)
	for _, who := range []string{"agent", "viewer", "nobody"} {
		t.Run(who+" attach stdin", func(t *testing.T) {
			ts.expectAttachRefused(t, fx.tokens[who], testNS, "s", true, 403, string(actuation.CodeForbidden))
		})
	}
	ts.expectAttachRefused(t, fx.tokens["viewer"], testNS, "s", false, 403, string(actuation.CodeForbidden))
}

// TestKubeRawInputGate: even an operator may attach with stdin only when the
// session's spec.rawInput is OperatorOnly.
func TestKubeRawInputGate(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{})
	ts.openSession(t, testNS, "disabled", wbv1.RawInputDisabled, 0)
	ts.openSession(t, testNS, "unset", "", 0)
	ts.openSession(t, testNS, "open", wbv1.RawInputOperatorOnly, 0)
	op := fx.tokens["operator"]
	ts.expectAttachRefused(t, op, testNS, "disabled", true, 403, string(actuation.CodeRawInputDisabled))
	ts.expectAttachRefused(t, op, testNS, "unset", true, 403, string(actuation.CodeRawInputDisabled))
	sendStdin(t, ts.attach(t, op, testNS, "open", true), []byte("x\n"))
	// A read-only attach of a disabled session is fine.
	ts.attach(t, op, testNS, "disabled", false)
	// The agent is refused by RBAC before the session is even looked at.
	ts.expectAttachRefused(t, fx.tokens["agent"], testNS, "open", true, 403, string(actuation.CodeForbidden))
}

// TestKubeInputEcho: the operator's stdin reaches /bin/cat on a real PTY; the
// attach stream carries the echo back, and the agent reads it through the events and
// screen endpoints.
func TestKubeInputEcho(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{})
	s := ts.openSession(t, testNS, "echo", wbv1.RawInputOperatorOnly, 0)
	cursor := s.Events().LastSeq()
	ws := ts.attach(t, fx.tokens["operator"], testNS, "echo", true)
	sendStdin(t, ws, []byte("hello data plane\n"))
	twice := func(b []byte) bool { return bytes.Count(b, []byte("hello data plane")) >= 2 }
	// The tty echoes the line and cat copies it: two occurrences.
	readStdout(t, ws, twice)
	out, _ := ts.readOutput(t, fx.tokens["agent"], testNS, "echo", cursor, twice)
	if !bytes.Contains(out, []byte("hello data plane\r\n")) {
		t.Errorf("output %q lacks the terminal line ending", out)
	}
	var scr ScreenResponse
	if err := json.Unmarshal(ts.expect(t, "GET", sessionPath(testNS, "echo", "screen"), fx.tokens["agent"], nil, 200, ""), &scr); err != nil {
		t.Fatal(err)
	}
	if len(scr.Lines) < 2 || scr.Lines[0] != "hello data plane" || scr.Lines[1] != "hello data plane" {
		t.Errorf("screen lines %q", scr.Lines)
	}
	if scr.Rows != 24 || scr.Cols != 80 || scr.Cursor.Row != 2 || len(scr.Digest) != 64 || scr.OutputBytes == 0 {
		t.Errorf("screen %+v", scr)
	}
}

// TestKubeFollowWakesOnOutput parks a followed event stream (observed through the
// server's wait hook, not by sleeping), then writes input: the stream delivers the new
// events.
func TestKubeFollowWakesOnOutput(t *testing.T) {
	fx := requireAPIServer(t)
	parked, onPark := parkSignal()
	ts := startKubeServer(t, Limits{}, CacheOptions{}, onPark)
	s := ts.openSession(t, testNS, "wake", wbv1.RawInputOperatorOnly, 0)
	cursor := s.Events().LastSeq()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := ts.follow(t, ctx, fx.tokens["agent"], testNS, "wake", cursor)
	select {
	case <-parked:
	case <-ctx.Done():
		t.Fatal("the followed stream never parked")
	}
	sendStdin(t, ts.attach(t, fx.tokens["operator"], testNS, "wake", true), []byte("wake\n"))
	evs := decodeEvents(t, resp.Body, func(evs []SessionEvent) bool { return bytes.Contains(outputOf(evs), []byte("wake")) })
	if len(evs) == 0 || evs[0].Seq != cursor+1 {
		t.Fatalf("the stream returned %+v; want events from %d", evs, cursor+1)
	}
}

// TestKubeEventsReadDoesNotWait: an unfollowed read of an idle session answers at once
// with no events; a cursor ahead of the ring is refused.
func TestKubeEventsReadDoesNotWait(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{})
	s := ts.openSession(t, testNS, "quiet", wbv1.RawInputOperatorOnly, 0)
	cursor := s.Events().LastSeq()
	if evs := ts.events(t, fx.tokens["agent"], testNS, "quiet", cursor); len(evs) != 0 {
		t.Errorf("idle read returned %+v", evs)
	}
	ts.expect(t, "GET", fmt.Sprintf("%s?since=%d", sessionPath(testNS, "quiet", "events"), cursor+1000), fx.tokens["agent"], nil, 400, string(actuation.CodeBadRequest))
}

// TestKubeStreamCap: with one stream slot the second concurrent followed stream is
// refused with 429 queue-full, and so is an attach; plain reads still work.
func TestKubeStreamCap(t *testing.T) {
	fx := requireAPIServer(t)
	parked, onPark := parkSignal()
	ts := startKubeServer(t, Limits{MaxLongPolls: 1}, CacheOptions{}, onPark)
	s := ts.openSession(t, testNS, "cap", wbv1.RawInputOperatorOnly, 0)
	cursor := s.Events().LastSeq()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts.follow(t, ctx, fx.tokens["agent"], testNS, "cap", cursor)
	select {
	case <-parked:
	case <-time.After(20 * time.Second):
		t.Fatal("the first followed stream never parked")
	}
	ts.expect(t, "GET", fmt.Sprintf("%s?since=%d&follow=true", sessionPath(testNS, "cap", "events"), cursor), fx.tokens["agent"], nil, 429, string(actuation.CodeQueueFull))
	ts.expectAttachRefused(t, fx.tokens["agent"], testNS, "cap", false, 429, string(actuation.CodeQueueFull))
	ts.events(t, fx.tokens["agent"], testNS, "cap", cursor)
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
	evs := ts.events(t, fx.tokens["agent"], testNS, "gap", 0)
	if len(evs) < 2 || evs[0].Type != "gap" || evs[0].From != 1 || evs[0].To < 1 {
		t.Fatalf("no gap marker from seq 1: %+v", evs)
	}
	gap, last := evs[0], evs[len(evs)-1].Seq
	if evs[1].Seq != gap.To+1 {
		t.Fatalf("events do not resume after the gap %+v: %+v", gap, evs[1:])
	}
	after := ts.events(t, fx.tokens["agent"], testNS, "gap", last)
	if len(after) > 0 && after[0].Type == "gap" && after[0].From <= last {
		// Only a concurrent eviction can produce a new gap; it must start after the old cursor.
		t.Errorf("a second gap overlaps the first read: %+v after cursor %d", after[0], last)
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
	read := func(q string) string { return filesPath(testNS, "env") + "?op=read&root=work&" + q }

	status, data, hd := ts.dp().Get(t, read("path=hello.txt"), agent)
	if status != 200 || string(data) != "hello world\n" || hd.Get("X-Workbench-Size") != "12" ||
		hd.Get("X-Workbench-Truncated") != "false" || hd.Get("X-Workbench-Digest") == "" {
		t.Errorf("read: %d %q %v", status, data, hd)
	}
	status, data, hd = ts.dp().Get(t, read("path=hello.txt&offset=6&limit=5"), agent)
	if status != 200 || string(data) != "world" || hd.Get("X-Workbench-Truncated") != "true" {
		t.Errorf("windowed read: %d %q %v", status, data, hd)
	}
	ts.expect(t, "GET", read("path=../outside/secret.txt"), agent, nil, 400, string(actuation.CodePathTraversal))
	ts.expect(t, "GET", read("path=sub/../../outside/secret.txt"), agent, nil, 400, string(actuation.CodePathTraversal))
	ts.expect(t, "GET", read("path=escape"), agent, nil, 403, string(actuation.CodeSymlinkEscape))
	ts.expect(t, "GET", read("path=escape-relative"), agent, nil, 403, string(actuation.CodeSymlinkEscape))
	ts.expect(t, "GET", read("path=/etc/passwd"), agent, nil, 400, string(actuation.CodePathAbsolute))
	ts.expect(t, "GET", read("path="), agent, nil, 400, string(actuation.CodePathEmpty))
	ts.expect(t, "GET", read("path=missing.txt"), agent, nil, 404, string(actuation.CodePathNotFound))
	ts.expect(t, "GET", read("path=hello.txt&limit=1048577"), agent, nil, 400, string(actuation.CodeReadCapAboveMax))
	ts.expect(t, "GET", read("path=hello.txt&offset=-1"), agent, nil, 400, string(actuation.CodeBadRequest))
	ts.expect(t, "GET", filesPath(testNS, "env")+"?op=read&root=other&path=hello.txt", agent, nil, 404, string(actuation.CodeNotFound))
	ts.expect(t, "GET", filesPath(testNS, "env")+"?op=read&root=Bad_Root&path=hello.txt", agent, nil, 400, string(actuation.CodeBadRequest))
	ts.expect(t, "GET", filesPath(testNS, "env")+"?op=write&root=work&path=hello.txt", agent, nil, 400, string(actuation.CodeBadRequest))

	var snap fsaccess.Snapshot
	if err := json.Unmarshal(ts.expect(t, "GET", filesPath(testNS, "env")+"?op=snapshot&root=work", agent, nil, 200, ""), &snap); err != nil {
		t.Fatal(err)
	}
	types := map[string]fsaccess.EntryType{}
	for _, e := range snap.Entries {
		types[e.Path] = e.Type
	}
	if types["hello.txt"] != fsaccess.TypeFile || types["escape"] != fsaccess.TypeSymlink || snap.Truncated {
		t.Errorf("snapshot entries %v truncated=%v", types, snap.Truncated)
	}
	ts.expect(t, "GET", filesPath(testNS, "env")+"?root=work&path=../outside", agent, nil, 400, string(actuation.CodePathTraversal))
}

// TestKubeResizeAndSignal: resize reaches the screen model; SIGINT ends cat,
// the event stream reports the exit and ends, a later attach with stdin is refused.
func TestKubeResizeAndSignal(t *testing.T) {
	fx := requireAPIServer(t)
	ts := startKubeServer(t, Limits{}, CacheOptions{})
	ts.openSession(t, testNS, "sig", wbv1.RawInputOperatorOnly, 0)
	op := fx.tokens["operator"]
	ts.expect(t, "POST", sessionPath(testNS, "sig", "resize"), op, ResizeRequest{Rows: 30, Cols: 100}, 200, "")
	var scr ScreenResponse
	if err := json.Unmarshal(ts.expect(t, "GET", sessionPath(testNS, "sig", "screen"), op, nil, 200, ""), &scr); err != nil {
		t.Fatal(err)
	}
	if scr.Rows != 30 || scr.Cols != 100 {
		t.Errorf("screen after resize: %dx%d", scr.Rows, scr.Cols)
	}
	ts.expect(t, "POST", sessionPath(testNS, "sig", "resize"), op, ResizeRequest{Rows: 30, Cols: 5000}, 400, string(actuation.CodeInvalidSpec))
	ts.expect(t, "POST", sessionPath(testNS, "sig", "signal"), op, SignalRequest{Signal: "INT"}, 400, string(actuation.CodeBadRequest))
	ts.expect(t, "POST", sessionPath(testNS, "sig", "signal"), op, SignalRequest{Signal: "SIGINT"}, 200, "")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The followed stream ends when the ring closes.
	evs := decodeEvents(t, ts.follow(t, ctx, op, testNS, "sig", 0).Body, nil)
	var exit *SessionEvent
	for i := range evs {
		if evs[i].Type == string(ring.KindExit) {
			exit = &evs[i]
		}
	}
	if exit == nil || exit.Signal != "SIGINT" {
		t.Errorf("exit event %+v, want signal SIGINT", exit)
	}
	ts.expectAttachRefused(t, op, testNS, "sig", true, 409, string(actuation.CodeSessionNotRunning))
}

package apiserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	protocol "sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/test/envtest"
)

// watchingForwarder is a Forwarder whose client can watch (as New builds it): output?follow
// waits on a watch of the command.
func watchingForwarder(t *testing.T) (*Forwarder, *envtest.CA) {
	t.Helper()
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: crdScheme()})
	must(t, err)
	return forwarderWith(t, c)
}

// unboundCommand creates a TerminalCommand no node is bound to (its session does not
// exist, so the binding webhook labels no node) and returns it.
func unboundCommand(t *testing.T, ns, name string) *wbv1.TerminalCommand {
	t.Helper()
	c := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.TerminalCommandSpec{
		SessionRef: "nope", ProfileRef: "git", Argv: []string{"/usr/bin/git", "status"}, Cwd: wbv1.CwdAddress{Root: "repo"}}}
	must(t, env.Client.Create(context.Background(), c))
	if c.Labels[wbv1.NodeLabel] != "" {
		t.Fatalf("command %s was bound at create: %v", name, c.Labels)
	}
	return c
}

// get runs a GET of target against h behind a real HTTP server (the client waits at most
// 20 s) and returns the response with its body read.
func get(t *testing.T, h http.Handler, target string, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	front := httptest.NewServer(h)
	defer front.Close()
	req, err := http.NewRequest(http.MethodGet, front.URL+target, nil)
	must(t, err)
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	hc := front.Client()
	hc.Timeout = 20 * time.Second
	resp, err := hc.Do(req)
	must(t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp, raw
}

// TestOutputOfUnboundCommand: terminalcommands/output of a command no node holds yet answers
// without a node: no bytes and X-Workbench-Command-State NotStarted (Ended once the command
// is final without starting); a WebSocket upgrade is refused command-not-started; a
// startWaitSeconds that is not a number or above the bound is refused bad-request.
func TestOutputOfUnboundCommand(t *testing.T) {
	ctx := context.Background()
	fwd, _ := watchingForwarder(t)
	ns := env.Namespace(t, "apiserver-out-")
	c := unboundCommand(t, ns, "c")
	h, err := fwd.Handler(callerContext(ns), "terminalcommands", "c", "output")
	must(t, err)

	resp, body := get(t, h, "/", nil)
	if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.Header.Get(protocol.CommandStateHeader) != protocol.CommandStateNotStarted {
		t.Fatalf("output of an unbound command: %d %s=%q body %q", resp.StatusCode, protocol.CommandStateHeader, resp.Header.Get(protocol.CommandStateHeader), body)
	}
	for _, bad := range []string{"abc", "-1", "601", "99999999999"} {
		// (a wait the bound let through would hold the request: the client gives up first)
		resp, body := get(t, h, "/?follow=true&startWaitSeconds="+bad, nil)
		var st metav1.Status
		_ = json.Unmarshal(body, &st)
		if resp.StatusCode != http.StatusBadRequest || protocol.CodeOfStatus(&st) != string(actuation.CodeBadRequest) {
			t.Errorf("startWaitSeconds=%s: %d %q (%s), want 400 %s", bad, resp.StatusCode, protocol.CodeOfStatus(&st), body, actuation.CodeBadRequest)
		}
	}
	code, st := serve(t, h, http.MethodGet, "/", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}})
	if code != http.StatusConflict || protocol.CodeOfStatus(st) != string(actuation.CodeCommandNotStarted) {
		t.Fatalf("a WebSocket for an unbound command: %d %q (%s), want 409 %s", code, protocol.CodeOfStatus(st), st.Message, actuation.CodeCommandNotStarted)
	}

	c.Status.Conditions = []metav1.Condition{{Type: wbv1.ConditionCompleted, Status: metav1.ConditionTrue, Reason: wbv1.ReasonCancelled, Message: "cancelled", LastTransitionTime: metav1.Now()}}
	must(t, env.Client.Status().Update(ctx, c))
	// follow=true of a final command answers at once: nothing will start.
	resp, body = get(t, h, "/?follow=true", nil)
	if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.Header.Get(protocol.CommandStateHeader) != protocol.CommandStateEnded {
		t.Fatalf("output of a command final before it started: %d %s=%q body %q", resp.StatusCode, protocol.CommandStateHeader, resp.Header.Get(protocol.CommandStateHeader), body)
	}
}

// TestOutputFollowForwardsOnceBound: output?follow=true of an unbound command waits for its
// binding and then forwards to the bound node's data plane, with the caller's identity and
// a startWaitSeconds no larger than what the caller asked for.
func TestOutputFollowForwardsOnceBound(t *testing.T) {
	ctx := context.Background()
	fwd, clientCA := watchingForwarder(t)
	n := startNode(t, clientCA)
	ns := fixture(t, "node-follow", n.srv.URL, n.ca.CertPEM, false)
	c := unboundCommand(t, ns, "c")
	h, err := fwd.Handler(callerContext(ns), "terminalcommands", "c", "output")
	must(t, err)
	// The manager's gate binds the command while the caller waits (a watch event, whether it
	// lands before or after the wait's watch began: the watch starts at the version read).
	patched := make(chan error, 1)
	go func() {
		orig := c.DeepCopy()
		c.Labels = map[string]string{wbv1.NodeLabel: "node-follow"}
		patched <- env.Client.Patch(ctx, c, client.MergeFrom(orig))
	}()
	code, st := serve(t, h, http.MethodGet, "/?follow=true&startWaitSeconds=120", nil)
	must(t, <-patched)
	if code != http.StatusTooManyRequests || protocol.CodeOfStatus(st) != string(actuation.CodeQueueFull) {
		t.Fatalf("follow of a command bound meanwhile: %d %q (%s), want the node's 429 %s", code, protocol.CodeOfStatus(st), st.Message, actuation.CodeQueueFull)
	}
	r := <-n.got
	<-n.peer
	if want := protocol.V2Path(ns, "terminalcommands", "c", "output"); r.URL.Path != want {
		t.Fatalf("the node saw %s, want %s", r.URL.Path, want)
	}
	if w, err := strconv.Atoi(r.URL.Query().Get("startWaitSeconds")); err != nil || w < 0 || w > 120 {
		t.Fatalf("forwarded startWaitSeconds %d, want what is left of 120", w)
	}
	if got := r.Header.Get(protocol.HeaderRemoteUser); got != "alice" {
		t.Fatalf("forwarded user %q, want alice", got)
	}
}

// Package dpclient is the tests' client of a node's data plane (protocol v2,
// internal/dataplane/protocol/v2): plain requests, the JSON Lines event stream, attach
// streams with stdin (the remote command WebSocket protocol) and the refusal codes of
// metav1.Status bodies. The data plane's own package tests, the node-agent suites and the
// security suite share it instead of each keeping a copy. It imports the protocol, never
// the node agent, so the data plane's in-package tests can use it.
package dpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
)

// Remote command channels the attach stream uses.
const (
	chanStdin  = 0
	chanStdout = 1
)

// MaxBody bounds a response body the client reads.
const MaxBody = 16 << 20

// Client calls one node's data plane.
type Client struct {
	// Endpoint is the base URL (https://host:port).
	Endpoint string
	// HTTP trusts the data plane's certificate (its transport is an *http.Transport).
	HTTP *http.Client
}

// SessionPath is the v2 path of a terminal-session subresource.
func SessionPath(ns, name, sub string) string {
	return protocol.V2Path(ns, "terminalsessions", name, sub)
}

// FilesPath is the v2 path of an environment's files (query: op, root, path, ...).
func FilesPath(ns, env string) string { return protocol.V2Path(ns, "environments", env, "files") }

// RawBody is a request body sent as it is (any other body is JSON-encoded).
type RawBody string

// Send sends one request with the bearer token and extra headers and returns the
// response unread.
func (c Client) Send(ctx context.Context, method, path, token string, body any, hdr http.Header) (*http.Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case RawBody:
		rd = strings.NewReader(string(b))
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Endpoint+path, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.HTTP.Do(req)
}

// Request sends one request and reads the response (at most MaxBody).
func (c Client) Request(ctx context.Context, method, path, token string, body any) (int, []byte, error) {
	resp, err := c.Send(ctx, method, path, token, body, nil)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	return resp.StatusCode, raw, err
}

// Call is Request that fails the test on a transport error.
func (c Client) Call(tb testing.TB, method, path, token string, body any) (int, []byte) {
	tb.Helper()
	status, raw, err := c.Request(context.Background(), method, path, token, body)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	return status, raw
}

// Get sends GET path and returns the status, the body (at most MaxBody) and the response
// header (a file read's X-Workbench-* facts).
func (c Client) Get(tb testing.TB, path, token string) (int, []byte, http.Header) {
	tb.Helper()
	resp, err := c.Send(context.Background(), http.MethodGet, path, token, nil, nil)
	if err != nil {
		tb.Fatalf("GET %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		tb.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, raw, resp.Header
}

// Code is the stable refusal code of a metav1.Status body (details.causes[0].type); the
// test fails when body is not a Status with a message.
func Code(tb testing.TB, body []byte) string {
	tb.Helper()
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil {
		tb.Fatalf("error body %q: %v", body, err)
	}
	if st.Message == "" || st.Kind != "Status" {
		tb.Errorf("error body %q is not a Status with a message", body)
	}
	return protocol.CodeOfStatus(&st)
}

// Expect checks the status (and the refusal code, when code is set) of one request and
// returns the body.
func (c Client) Expect(tb testing.TB, method, path, token string, body any, status int, code string) []byte {
	tb.Helper()
	got, resp := c.Call(tb, method, path, token, body)
	if got != status {
		tb.Fatalf("%s %s: status %d, want %d; body %s", method, path, got, status, resp)
	}
	if code != "" {
		if c := Code(tb, resp); c != code {
			tb.Fatalf("%s %s: code %q, want %q; body %s", method, path, c, code, resp)
		}
	}
	return resp
}

// Events reads the session's events after since (GET .../events, not followed).
func (c Client) Events(tb testing.TB, token, ns, name string, since uint64) []protocol.SessionEvent {
	tb.Helper()
	body := c.Expect(tb, http.MethodGet, fmt.Sprintf("%s?since=%d", SessionPath(ns, name, "events"), since), token, nil, http.StatusOK, "")
	return DecodeEvents(tb, bytes.NewReader(body), nil)
}

// DecodeEvents decodes JSON Lines events until the stream ends or stop(events so far)
// holds (nil: the end).
func DecodeEvents(tb testing.TB, r io.Reader, stop func([]protocol.SessionEvent) bool) []protocol.SessionEvent {
	tb.Helper()
	var evs []protocol.SessionEvent
	dec := json.NewDecoder(r)
	for stop == nil || !stop(evs) {
		var ev protocol.SessionEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return evs
			}
			tb.Fatalf("decoding the event stream after %d events: %v", len(evs), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// Output concatenates the output of evs.
func Output(evs []protocol.SessionEvent) []byte {
	var out []byte
	for _, e := range evs {
		if e.Type == "output" {
			out = append(out, e.Text...)
			out = append(out, e.DataBase64...)
		}
	}
	return out
}

// Follow opens GET .../events?follow=true after since; the stream is the response body,
// bounded by ctx and closed when the test ends.
func (c Client) Follow(tb testing.TB, ctx context.Context, token, ns, name string, since uint64) *http.Response {
	tb.Helper()
	hc := *c.HTTP
	hc.Timeout = 0 // a followed stream lasts as long as ctx, not the client's per-request bound
	c.HTTP = &hc
	resp, err := c.Send(ctx, http.MethodGet, fmt.Sprintf("%s?since=%d&follow=true", SessionPath(ns, name, "events"), since), token, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
		tb.Fatalf("following the events of %s/%s: status %d: %s", ns, name, resp.StatusCode, raw)
	}
	return resp
}

// FollowOutput follows the session's events after since until until(output) holds,
// within timeout; the stream ending first fails the test. It returns the output and the
// last sequence number read.
func (c Client) FollowOutput(tb testing.TB, token, ns, name string, since uint64, timeout time.Duration, until func([]byte) bool) ([]byte, uint64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp := c.Follow(tb, ctx, token, ns, name, since)
	evs := DecodeEvents(tb, resp.Body, func(evs []protocol.SessionEvent) bool { return until(Output(evs)) })
	out := Output(evs)
	if !until(out) {
		tb.Fatalf("the event stream of %s/%s ended before the expected output; got %q", ns, name, out)
	}
	return out, evs[len(evs)-1].Seq
}

// Upgrade is the header of a WebSocket upgrade request for the attach route: a refusal
// is answered before the handshake, as a plain response.
var Upgrade = http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
	"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "Sec-Websocket-Protocol": {protocol.ProtocolV5}}

// ExpectAttachRefused asks for an attach (with stdin or without) and expects a refusal
// with status and code.
func (c Client) ExpectAttachRefused(tb testing.TB, token, ns, name string, stdin bool, status int, code string) {
	tb.Helper()
	path := fmt.Sprintf("%s?stdin=%t", SessionPath(ns, name, "attach"), stdin)
	resp, err := c.Send(context.Background(), http.MethodGet, path, token, nil, Upgrade)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if resp.StatusCode != status {
		tb.Fatalf("attach %s: status %d, want %d; body %s", path, resp.StatusCode, status, raw)
	}
	if got := Code(tb, raw); got != code {
		tb.Fatalf("attach %s: code %q, want %q; body %s", path, got, code, raw)
	}
}

// Attach opens an attach stream (remote command protocol v5) on session ns/name, closed
// when the test ends.
func (c Client) Attach(tb testing.TB, token, ns, name string, stdin bool) *websocket.Conn {
	tb.Helper()
	loc := "wss" + strings.TrimPrefix(c.Endpoint, "https") + fmt.Sprintf("%s?stdin=%t", SessionPath(ns, name, "attach"), stdin)
	cfg, err := websocket.NewConfig(loc, c.Endpoint)
	if err != nil {
		tb.Fatal(err)
	}
	tr, ok := c.HTTP.Transport.(*http.Transport)
	if !ok {
		tb.Fatalf("the data plane client's transport is a %T, not an *http.Transport", c.HTTP.Transport)
	}
	cfg.TlsConfig = tr.TLSClientConfig
	cfg.Protocol = []string{protocol.ProtocolV5}
	cfg.Header = http.Header{"Authorization": {"Bearer " + token}}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		tb.Fatalf("attach to %s/%s (stdin=%t): %v", ns, name, stdin, err)
	}
	ws.PayloadType = websocket.BinaryFrame
	tb.Cleanup(func() { _ = ws.Close() })
	return ws
}

// SendStdin writes data on the stdin channel of an attach stream.
func SendStdin(tb testing.TB, ws *websocket.Conn, data []byte) {
	tb.Helper()
	if err := websocket.Message.Send(ws, append([]byte{chanStdin}, data...)); err != nil {
		tb.Fatalf("sending stdin: %v", err)
	}
}

// ReadStdout reads stdout frames of an attach stream until until(stdout) holds, within
// timeout.
func ReadStdout(tb testing.TB, ws *websocket.Conn, timeout time.Duration, until func([]byte) bool) []byte {
	tb.Helper()
	var out []byte
	_ = ws.SetReadDeadline(time.Now().Add(timeout))
	defer func() { _ = ws.SetReadDeadline(time.Time{}) }()
	for !until(out) {
		var f []byte
		if err := websocket.Message.Receive(ws, &f); err != nil {
			tb.Fatalf("the attach stream ended before the expected output (%v); got %q", err, out)
		}
		if len(f) > 0 && f[0] == chanStdout {
			out = append(out, f[1:]...)
		}
	}
	return out
}

// Echo types line into session ns/name through an attach with stdin as token and waits
// (within timeout) until the session's output, followed from its start as reader, holds
// line at least n times (a terminal echoes the line, then cat prints it: 2).
func (c Client) Echo(tb testing.TB, token, reader, ns, name, line string, n int, timeout time.Duration) []byte {
	tb.Helper()
	SendStdin(tb, c.Attach(tb, token, ns, name, true), []byte(line+"\n"))
	out, _ := c.FollowOutput(tb, reader, ns, name, 0, timeout, func(b []byte) bool { return bytes.Count(b, []byte(line)) >= n })
	return out
}

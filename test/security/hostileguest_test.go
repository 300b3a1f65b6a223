package security

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends/guestfs"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// hostileGuest serves the guest protocol on a Unix socket (the conformance transport) the
// way a compromised guest agent could: a valid handshake, then every request answered
// with a succeeded result whose data is data and whose bulk is bulk — whatever the
// request asked for. It returns the endpoint to dial.
func hostileGuest(t *testing.T, data any, bulk []byte) guestclient.Endpoint {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "guest.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	rawData, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(c net.Conn) {
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
		if f, err := protocol.ReadFrame(c); err != nil || f.Type != protocol.FrameHandshake {
			return
		}
		ack, _ := json.Marshal(protocol.HandshakeAck{Protocol: protocol.Version, Channel: strings.Repeat("ab", 16),
			BootID: "hostile", AgentVersion: "hostile", Limits: protocol.WireLimits()})
		p, _ := json.Marshal(protocol.Result{Outcome: protocol.OutcomeSucceeded, Data: ack})
		if protocol.WriteFrame(c, &protocol.Frame{Header: protocol.Header{Type: protocol.FrameResult}, Payload: p}) != nil {
			return
		}
		for {
			f, err := protocol.ReadFrame(c)
			if err != nil {
				return
			}
			var req protocol.Request
			if json.Unmarshal(f.Payload, &req) != nil {
				return
			}
			res := protocol.Result{Op: req.Op, OpID: req.OpID, Outcome: protocol.OutcomeSucceeded, Data: rawData,
				Bulk: &protocol.Bulk{Bytes: uint64(len(bulk)), Digest: protocol.DigestOf(bulk)}}
			p, _ := json.Marshal(res)
			h := protocol.Header{Type: protocol.FrameResult, Seq: f.Seq, Count: protocol.ChunkCount(uint64(len(bulk)))}
			if protocol.WriteFrame(c, &protocol.Frame{Header: h, Payload: p}) != nil {
				return
			}
			// The host stops reading (and closes) when it refuses: the write fails then.
			if protocol.WriteTransfer(c, f.Seq, bulk) != nil {
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return guestclient.Endpoint{Path: sock}
}

// heapGrowth runs fn and returns the bytes the process allocated meanwhile (TotalAlloc
// counts every allocation, so it bounds the heap's peak growth from above).
func heapGrowth(fn func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHostileGuestDecodingBomb: a guest answers the node's file.snapshot (through
// guestfs, the node agent's own path) with a maximal transfer (64 MiB) built to blow up
// when decoded — millions of tiny entries, one enormous entry, a deeply nested value.
// The node refuses each one with a code while it decodes (never after decoding the
// whole transfer), and the process's allocations stay far below what decoding the
// transfer would take. Before the fix the tiny-entry bomb alone allocated gigabytes
// (22 million entries decoded, then counted).
func TestHostileGuestDecodingBomb(t *testing.T) {
	const (
		size  = protocol.MaxTransfer
		bound = 96 << 20 // generous: the whole transfer is 64 MiB; decoding it whole takes GiBs
	)
	nested := append([]byte(`[{"path":`), bytes.Repeat([]byte("["), size-len(`[{"path":`))...)
	huge := append(append([]byte(`[{"path":"`), bytes.Repeat([]byte("a"), size-len(`[{"path":"`)-len(`","type":"file"}]`))...), `","type":"file"}]`...)
	cases := []struct {
		name     string
		bulk     []byte
		declared uint32
		code     string // fsaccess code of the refusal (guestfs), or the protocol code in its chain
	}{
		{"tiny-entries", tinyEntries(size), uint32(size / 3), string(actuation.CodeAnswerOverBound)},
		{"one-huge-entry", huge, 1, string(actuation.CodeAnswerOverBound)},
		{"deep-nesting", nested, 1, string(actuation.CodeMalformedPayload)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.bulk) != size {
				t.Fatalf("bomb of %d bytes, want %d", len(tc.bulk), size)
			}
			ep := hostileGuest(t, protocol.SnapshotData{Entries: tc.declared}, tc.bulk)
			dial := func(ctx context.Context) (*guestclient.Client, error) {
				return guestclient.Connect(ctx, ep, hostileBinding())
			}
			root, err := guestfs.New(dial, "root")
			if err != nil {
				t.Fatal(err)
			}
			var serr error
			grew := heapGrowth(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				_, serr = root.Snapshot(ctx, "", fsaccess.SnapshotLimits{})
			})
			t.Logf("%s: %v; allocated %d MiB while answering", tc.name, serr, grew>>20)
			if serr == nil {
				t.Fatalf("the hostile listing was accepted")
			}
			if got := string(actuation.CodeOf(serr)); got != tc.code && !errors.Is(serr, &actuation.Refusal{Code: actuation.Code(tc.code)}) {
				t.Errorf("refused with %q, want %q (or it in the refusal's chain): %v", got, tc.code, serr)
			}
			if !errors.Is(serr, guestclient.ErrProtocol) {
				t.Errorf("the refusal does not say the guest violated the protocol: %v", serr)
			}
			if grew > bound {
				t.Errorf("decoding the guest's answer allocated %d MiB, bound %d MiB", grew>>20, bound>>20)
			}
		})
	}
}

// tinyEntries is a JSON array of n bytes of empty objects: "[{},{},...,{}]" padded with
// spaces to exactly n bytes.
func tinyEntries(n int) []byte {
	b := make([]byte, 0, n)
	b = append(b, '[')
	for len(b)+4 <= n {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '{', '}')
	}
	b = append(b, ']')
	for len(b) < n {
		b = append(b, ' ')
	}
	return b
}

func hostileBinding() protocol.Binding {
	return protocol.Binding{
		EnvironmentRef:   "default/hostile",
		SourceGeneration: 1,
		PlanDigest:       protocol.DigestOf([]byte("plan")),
		ImageDigest:      protocol.DigestOf([]byte("image")),
		GuestCID:         3,
		BootNonce:        strings.Repeat("0", protocol.NonceHexLen),
	}
}

package protocol

import (
	"bytes"
	"encoding/json"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

// FuzzDecodeFrame: arbitrary bytes never panic, never yield a frame beyond the caps, and
// every accepted frame re-encodes to exactly the input; ReadFrame agrees with DecodeFrame.
func FuzzDecodeFrame(f *testing.F) {
	seeds := []Frame{
		{Header: Header{Type: FrameHandshake, DeadlineMS: 1000}, Payload: []byte(`{"protocol":1}`)},
		{Header: Header{Type: FrameRequest, Seq: 1, DeadlineMS: 10, Count: 1}, Payload: []byte(`{"op":"inspect"}`)},
		{Header: Header{Type: FrameChunk, Seq: 1, Count: 1}, Payload: []byte("x")},
		{Header: Header{Type: FrameResult, Seq: 1}, Payload: []byte(`{"outcome":"succeeded"}`)},
		{Header: Header{Type: FrameError}, Payload: []byte(`{"code":"bad-magic"}`)},
	}
	for _, s := range seeds {
		b, err := AppendFrame(nil, &s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	f.Add([]byte("WBGP"))
	f.Fuzz(func(t *testing.T, in []byte) {
		fr, err := DecodeFrame(in)
		rf, rerr := ReadFrame(bytes.NewReader(in))
		if err != nil {
			if actuation.CodeOf(err) == "" {
				t.Fatalf("DecodeFrame error without refusal code: %v", err)
			}
			if rerr == nil && len(in) == HeaderSize+int(rf.Length) {
				t.Fatalf("ReadFrame accepted what DecodeFrame refused: %v", err)
			}
			return
		}
		if rerr != nil {
			t.Fatalf("DecodeFrame accepted, ReadFrame refused: %v", rerr)
		}
		if rf.Header != fr.Header || !bytes.Equal(rf.Payload, fr.Payload) {
			t.Fatal("ReadFrame and DecodeFrame disagree")
		}
		if len(fr.Payload) > MaxPayload || fr.Count > MaxChunks {
			t.Fatalf("accepted frame beyond caps: %d bytes, %d chunks", len(fr.Payload), fr.Count)
		}
		out, err := AppendFrame(nil, &fr)
		if err != nil {
			t.Fatalf("accepted frame does not re-encode: %v", err)
		}
		if !bytes.Equal(out, in) {
			t.Fatal("re-encoding differs from the input")
		}
	})
}

// FuzzHandshake: an arbitrary handshake payload never panics, and is accepted only when
// every binding field equals the expected binding exactly.
func FuzzHandshake(f *testing.F) {
	b := testBinding()
	good, _ := json.Marshal(Handshake{Protocol: Version, Binding: b})
	f.Add(good)
	stale := Handshake{Protocol: Version, Binding: b}
	stale.BootNonce = "00" + stale.BootNonce[2:]
	sb, _ := json.Marshal(stale)
	f.Add(sb)
	f.Add([]byte(`{"protocol":1,"environmentRef":"default/demo"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		if len(payload) > MaxPayload {
			return
		}
		var h Handshake
		if err := DecodeJSON(payload, &h); err != nil {
			if actuation.CodeOf(err) != actuation.CodeMalformedPayload {
				t.Fatalf("decode error with code %q", actuation.CodeOf(err))
			}
			return
		}
		err := b.Check(&h)
		if err == nil {
			if h.Protocol != Version || h.Binding != b {
				t.Fatalf("accepted a handshake that differs from the binding: %+v", h)
			}
			return
		}
		if actuation.CodeOf(err) == "" {
			t.Fatalf("refusal without code: %v", err)
		}
	})
}

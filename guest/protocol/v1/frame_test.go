package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/testkit"
)

func encode(t testing.TB, f Frame) []byte {
	t.Helper()
	b, err := AppendFrame(nil, &f)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := string(actuation.CodeOf(err)); got != code {
		t.Fatalf("want refusal %q, got %v", code, err)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	frames := []Frame{
		{Header: Header{Type: FrameHandshake, DeadlineMS: 1000}, Payload: []byte(`{"protocol":1}`)},
		{Header: Header{Type: FrameRequest, Seq: 7, DeadlineMS: 5, Count: 2}, Payload: []byte(`{}`)},
		{Header: Header{Type: FrameChunk, Seq: 7, Index: 1, Count: 2}, Payload: bytes.Repeat([]byte{1}, MaxPayload)},
		{Header: Header{Type: FrameResult, Seq: 7, Count: 3}, Payload: []byte(`{"outcome":"succeeded"}`)},
		{Header: Header{Type: FrameError, Seq: 7}, Payload: []byte(`{"code":"x"}`)},
	}
	for _, f := range frames {
		b, err := AppendFrame(nil, &f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadFrame(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f.Type, err)
		}
		if got.Header != f.Header || !bytes.Equal(got.Payload, f.Payload) {
			t.Fatalf("%s: round trip mismatch", f.Type)
		}
		d, err := DecodeFrame(b)
		if err != nil || d.Header != f.Header {
			t.Fatalf("%s: DecodeFrame: %v", f.Type, err)
		}
	}
}

func TestHeaderRefusals(t *testing.T) {
	good := encode(t, Frame{Header: Header{Type: FrameRequest, Seq: 1, DeadlineMS: 10}, Payload: []byte(`{}`)})
	mut := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		code string
	}{
		{"magic", mut(func(b []byte) { b[0] = 'X' }), string(actuation.CodeBadMagic)},
		{"version", mut(func(b []byte) { b[5] = 2 }), string(actuation.CodeUnsupportedVersion)},
		{"type", mut(func(b []byte) { b[6] = 9 }), string(actuation.CodeUnknownFrameType)},
		{"flags", mut(func(b []byte) { b[7] = 1 }), string(actuation.CodeReservedFlags)},
		{"seq0", mut(func(b []byte) { binary.BigEndian.PutUint64(b[8:], 0) }), string(actuation.CodeBadHeader)},
		{"no-deadline", mut(func(b []byte) { binary.BigEndian.PutUint32(b[16:], 0) }), string(actuation.CodeDeadlineMissing)},
		{"long-deadline", mut(func(b []byte) { binary.BigEndian.PutUint32(b[16:], MaxDeadlineMS+1) }), string(actuation.CodeDeadlineTooLong)},
		{"huge-length", mut(func(b []byte) { binary.BigEndian.PutUint32(b[20:], 1<<31) }), string(actuation.CodeFrameTooLarge)},
		{"too-many-chunks", mut(func(b []byte) { binary.BigEndian.PutUint32(b[28:], MaxChunks+1) }), string(actuation.CodeTooManyChunks)},
		{"digest", mut(func(b []byte) { b[HeaderSize] = '[' }), string(actuation.CodeDigestMismatch)},
		{"truncated-header", good[:HeaderSize-1], string(actuation.CodeTruncatedFrame)},
		{"truncated-payload", good[:len(good)-1], string(actuation.CodeTruncatedFrame)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(c.b))
			wantCode(t, err, c.code)
		})
	}
	if _, err := ReadFrame(bytes.NewReader(nil)); err != io.EOF {
		t.Fatalf("empty stream: want io.EOF, got %v", err)
	}
}

// A header announcing a huge payload is refused without reading (or allocating) it.
func TestOversizedFrameNotAllocated(t *testing.T) {
	var hb [HeaderSize]byte
	MarshalHeader(hb[:], &Header{Type: FrameChunk, Seq: 1, Count: 1, Length: MaxPayload + 1})
	r := io.MultiReader(bytes.NewReader(hb[:]), failReader{t})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFrame(r)
	runtime.ReadMemStats(&after)
	if actuation.CodeOf(err) != actuation.CodeFrameTooLarge {
		t.Fatalf("got %v", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 4096 {
		t.Fatalf("refusing an oversized frame allocated %d bytes", n)
	}
}

type failReader struct{ t *testing.T }

func (f failReader) Read([]byte) (int, error) {
	f.t.Fatal("payload was read after an oversized header")
	return 0, io.EOF
}

func TestWriteRefusesOversized(t *testing.T) {
	err := WriteFrame(io.Discard, &Frame{Header: Header{Type: FrameChunk, Seq: 1, Count: 1}, Payload: make([]byte, MaxPayload+1)})
	wantCode(t, err, string(actuation.CodeFrameTooLarge))
}

func transferFrames(t *testing.T, seq uint64, data []byte) FrameReader {
	var buf bytes.Buffer
	if err := WriteTransfer(&buf, seq, data); err != nil {
		t.Fatal(err)
	}
	return func() (Frame, error) { return ReadFrame(&buf) }
}

func TestTransfer(t *testing.T) {
	data := bytes.Repeat([]byte("abcdefgh"), (3*MaxPayload)/8+5)
	b := Bulk{Bytes: uint64(len(data)), Digest: DigestOf(data)}
	count := ChunkCount(b.Bytes)
	if count != 4 {
		t.Fatalf("count %d", count)
	}
	var sink bytes.Buffer
	if err := ReadTransfer(transferFrames(t, 3, data), 3, b, count, MaxTransfer, &sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), data) {
		t.Fatal("content mismatch")
	}

	t.Run("declared-too-large", func(t *testing.T) {
		big := Bulk{Bytes: MaxTransfer + 1, Digest: b.Digest}
		wantCode(t, ReadTransfer(nil, 3, big, ChunkCount(big.Bytes), MaxTransfer, io.Discard), string(actuation.CodeTransferTooLarge))
	})
	t.Run("count-mismatch", func(t *testing.T) {
		wantCode(t, ReadTransfer(nil, 3, b, count+1, MaxTransfer, io.Discard), string(actuation.CodeTransferMismatch))
	})
	t.Run("digest", func(t *testing.T) {
		bad := b
		bad.Digest = DigestOf([]byte("other"))
		wantCode(t, ReadTransfer(transferFrames(t, 3, data), 3, bad, count, MaxTransfer, io.Discard), string(actuation.CodeDigestMismatch))
	})
	t.Run("wrong-seq", func(t *testing.T) {
		wantCode(t, ReadTransfer(transferFrames(t, 4, data), 3, b, count, MaxTransfer, io.Discard), string(actuation.CodeUnexpectedFrame))
	})
	t.Run("short", func(t *testing.T) {
		var buf bytes.Buffer
		if err := WriteTransfer(&buf, 3, data); err != nil {
			t.Fatal(err)
		}
		short := bytes.NewReader(buf.Bytes()[:buf.Len()-100])
		err := ReadTransfer(func() (Frame, error) { return ReadFrame(short) }, 3, b, count, MaxTransfer, io.Discard)
		wantCode(t, err, string(actuation.CodeTransferIncomplete))
	})
	t.Run("limit", func(t *testing.T) {
		wantCode(t, ReadTransfer(nil, 3, b, count, 10, io.Discard), string(actuation.CodeTransferTooLarge))
	})
	t.Run("limited-buffer", func(t *testing.T) {
		lb := &LimitedBuffer{Max: 10}
		if _, err := lb.Write(make([]byte, 11)); actuation.CodeOf(err) != actuation.CodeTransferTooLarge {
			t.Fatalf("got %v", err)
		}
	})
}

func testBinding() Binding {
	return Binding{
		EnvironmentRef:   "default/demo",
		SourceGeneration: 3,
		PlanDigest:       DigestOf([]byte("plan")),
		ImageDigest:      DigestOf([]byte("image")),
		GuestCID:         3,
		BootNonce:        strings.Repeat("ab", 32),
	}
}

func TestHandshakeCheck(t *testing.T) {
	b := testBinding()
	ok := Handshake{Protocol: Version, Binding: b}
	if err := b.Check(&ok); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		code string
		mut  func(h *Handshake)
	}{
		{string(actuation.CodeProtocolMismatch), func(h *Handshake) { h.Protocol = 2 }},
		{string(actuation.CodeEnvironmentMismatch), func(h *Handshake) { h.EnvironmentRef = "default/other" }},
		{string(actuation.CodeGenerationMismatch), func(h *Handshake) { h.SourceGeneration = 2 }},
		{string(actuation.CodePlanDigestMismatch), func(h *Handshake) { h.PlanDigest = DigestOf(nil) }},
		{string(actuation.CodeImageDigestMismatch), func(h *Handshake) { h.ImageDigest = DigestOf(nil) }},
		{string(actuation.CodeCIDMismatch), func(h *Handshake) { h.GuestCID = 4 }},
		{string(actuation.CodeNonceMismatch), func(h *Handshake) { h.BootNonce = strings.Repeat("cd", 32) }},
		{string(actuation.CodeBindingInvalid), func(h *Handshake) { h.BootNonce = "short" }},
		{string(actuation.CodeBindingInvalid), func(h *Handshake) { h.SourceGeneration = 0 }},
	}
	for _, c := range cases {
		h := ok
		c.mut(&h)
		wantCode(t, b.Check(&h), c.code)
	}
}

func TestDecodeJSONStrict(t *testing.T) {
	var h Handshake
	wantCode(t, DecodeJSON([]byte(`{"protocol":1,"extra":1}`), &h), string(actuation.CodeMalformedPayload))
	wantCode(t, DecodeJSON([]byte(`{"protocol":1} {}`), &h), string(actuation.CodeMalformedPayload))
	wantCode(t, DecodeJSON([]byte(`[1]`), &h), string(actuation.CodeMalformedPayload))
	wantCode(t, DecodeJSON([]byte(`{"protocol":"1"}`), &h), string(actuation.CodeMalformedPayload))
	if err := DecodeJSON([]byte(`{"protocol":1}`), &h); err != nil || h.Protocol != 1 {
		t.Fatal(err)
	}
}

// TestCheckPathGoldenVectors runs the host's golden path vectors
// (test/vectors/relative-path.json, also run against actuation.ValidateRelativePath and
// fsaccess.CheckRel) against the guest's CheckPath: the guest refuses exactly what the
// host refuses, with the same code.
func TestCheckPathGoldenVectors(t *testing.T) {
	for _, v := range testkit.RelativePathVectors(t) {
		if got := string(actuation.CodeOf(CheckPath(v.Path, !v.RequireFile))); got != v.Code {
			t.Errorf("%s: CheckPath(%q, allowRoot=%v) = %q, want %q", v.Name, v.Path, !v.RequireFile, got, v.Code)
		}
	}
}

func TestStageRefGolden(t *testing.T) {
	// Golden vector: changing the construction changes every stage ref (and the schema
	// digest), which must be a deliberate protocol revision.
	got := StageRef("src/main.go", 5, DigestOf([]byte("hello")))
	const want = "sha256:3c69388fa9ec498f2714d1c6fef37d187507699383088e22264a386e3efb1725"
	if got != want {
		t.Fatalf("stage ref %s, golden %s", got, want)
	}
	if StageRef("src/main.go", 6, DigestOf([]byte("hello"))) == got || StageRef("src/other.go", 5, DigestOf([]byte("hello"))) == got {
		t.Fatal("stage ref does not bind target and length")
	}
}

// goldenSchemaDigest pins protocol v1's schema. A change to the frame layout, limits,
// operations, outcomes, signals or the stage-ref construction changes it: then it is a
// new protocol version (or a deliberate, reviewed change of v1) and this constant, the
// guest image's manifest (config/samples/07_imagemanifest.yaml, `make guest-image`) and
// every ImageManifest in use must change with it.
const goldenSchemaDigest = "sha256:ecadae314d8ad4073b8938d72fcdc3c619544bff5dc0e7aaf5111388aff1e22d"

func TestSchemaDigest(t *testing.T) {
	if got := SchemaDigest(); got != goldenSchemaDigest {
		t.Fatalf("protocol v1 schema digest is %s, golden %s: the wire schema changed", got, goldenSchemaDigest)
	}
	if !ValidDigest(SchemaDigest()) {
		t.Fatalf("schema digest %q is not a valid digest", SchemaDigest())
	}
}

func TestAckValidate(t *testing.T) {
	a := HandshakeAck{Protocol: Version, Channel: strings.Repeat("0", ChannelHexLen), Limits: WireLimits()}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	a.Limits.MaxTransfer++
	wantCode(t, a.Validate(), string(actuation.CodeMalformedPayload))
}

func TestRefusalIs(t *testing.T) {
	err := errors.Join(errors.New("x"), actuation.Refusef(actuation.CodeNotFound, "y"))
	if !errors.Is(err, &actuation.Refusal{Code: actuation.CodeNotFound}) {
		t.Fatal("errors.Is by code")
	}
	b, _ := json.Marshal(Result{Outcome: OutcomeRefused, Code: string(actuation.CodeNotFound)})
	var r Result
	if err := DecodeJSON(b, &r); err != nil || !r.Outcome.Valid() {
		t.Fatal(err)
	}
}

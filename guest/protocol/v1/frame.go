package protocol

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"sensorium.dev/workbench/internal/actuation"
)

// Version is the protocol version carried by every frame header and the handshake.
const Version = 1

// Wire limits. Every frame and every transfer is bounded by these before anything is
// allocated.
const (
	// HeaderSize is the fixed frame header size.
	HeaderSize = 64
	// MaxPayload is the largest payload of one frame.
	MaxPayload = 64 << 10
	// MaxChunks is the most chunk frames one transfer may declare.
	MaxChunks = 1024
	// MaxTransfer is the most bytes one transfer (upload or bulk result) may carry.
	MaxTransfer = 64 << 20
	// MaxDeadlineMS is the longest deadline a request may carry (10 minutes).
	MaxDeadlineMS = 10 * 60 * 1000
	// MaxHandshakeDeadlineMS is the longest deadline a handshake may carry.
	MaxHandshakeDeadlineMS = 30 * 1000
)

var magic = [4]byte{'W', 'B', 'G', 'P'}

// Ports and the readiness hint. The agent listens on AgentPort. Once it listens it makes
// one guest-initiated connection to the host (CID 2) on ReadyPort and writes ReadyLine:
// with hybrid vsock the device forwards it to the host socket "<uds>_<ReadyPort>". The
// host waits for it before its first CONNECT, because a host connection that reaches the
// device before the guest driver initialized its vrings can wedge the device. The line is
// a hint only; the handshake is the authority.
const (
	AgentPort = 1024
	ReadyPort = 1025
	ReadyLine = "WORKBENCH-GUEST-READY\n"
)

// FrameType is the closed set of V1 frame types.
type FrameType uint8

// Frame types.
const (
	FrameHandshake FrameType = 1
	FrameRequest   FrameType = 2
	FrameChunk     FrameType = 3
	FrameResult    FrameType = 4
	FrameError     FrameType = 5
)

func (t FrameType) String() string {
	switch t {
	case FrameHandshake:
		return "handshake"
	case FrameRequest:
		return "request"
	case FrameChunk:
		return "chunk"
	case FrameResult:
		return "result"
	case FrameError:
		return "error"
	}
	return fmt.Sprintf("frame-type(%d)", uint8(t))
}

// Header is a decoded frame header.
type Header struct {
	Type       FrameType
	Flags      uint8
	Seq        uint64
	DeadlineMS uint32
	Length     uint32
	Index      uint32
	Count      uint32
	Digest     [32]byte
}

// Frame is one header plus its payload.
type Frame struct {
	Header
	Payload []byte
}

// Validate checks the header's own rules (everything that can be checked without the
// payload). It never allocates.
func (h *Header) Validate() error {
	if h.Flags != 0 {
		return actuation.Refusef(actuation.CodeReservedFlags, "flags %#x", h.Flags)
	}
	if h.Length > MaxPayload {
		return actuation.Refusef(actuation.CodeFrameTooLarge, "payload length %d exceeds %d", h.Length, MaxPayload)
	}
	if h.Count > MaxChunks {
		return actuation.Refusef(actuation.CodeTooManyChunks, "chunk count %d exceeds %d", h.Count, MaxChunks)
	}
	switch h.Type {
	case FrameHandshake:
		if h.Seq != 0 || h.Count != 0 || h.Index != 0 {
			return actuation.Refusef(actuation.CodeBadHeader, "handshake must have sequence 0 and no chunks")
		}
		if h.DeadlineMS == 0 {
			return actuation.Refusef(actuation.CodeDeadlineMissing, "handshake without deadline")
		}
		if h.DeadlineMS > MaxHandshakeDeadlineMS {
			return actuation.Refusef(actuation.CodeDeadlineTooLong, "handshake deadline %d ms exceeds %d", h.DeadlineMS, MaxHandshakeDeadlineMS)
		}
	case FrameRequest:
		if h.Seq == 0 || h.Index != 0 {
			return actuation.Refusef(actuation.CodeBadHeader, "request must have a sequence >= 1 and index 0")
		}
		if h.DeadlineMS == 0 {
			return actuation.Refusef(actuation.CodeDeadlineMissing, "request without deadline")
		}
		if h.DeadlineMS > MaxDeadlineMS {
			return actuation.Refusef(actuation.CodeDeadlineTooLong, "request deadline %d ms exceeds %d", h.DeadlineMS, MaxDeadlineMS)
		}
	case FrameChunk:
		if h.Seq == 0 || h.Count == 0 || h.Index >= h.Count || h.DeadlineMS != 0 {
			return actuation.Refusef(actuation.CodeBadHeader, "chunk must have a sequence >= 1, index < count and no deadline")
		}
		if h.Length == 0 {
			return actuation.Refusef(actuation.CodeBadHeader, "empty chunk")
		}
	case FrameResult, FrameError:
		if h.Index != 0 || h.DeadlineMS != 0 {
			return actuation.Refusef(actuation.CodeBadHeader, "%s must have index 0 and no deadline", h.Type)
		}
		if h.Type == FrameError && h.Count != 0 {
			return actuation.Refusef(actuation.CodeBadHeader, "error frame with chunks")
		}
	default:
		return actuation.Refusef(actuation.CodeUnknownFrameType, "frame type %d", uint8(h.Type))
	}
	if h.Type != FrameChunk && h.Length == 0 {
		return actuation.Refusef(actuation.CodeMalformedPayload, "%s without payload", h.Type)
	}
	return nil
}

// MarshalHeader writes h into b (len >= HeaderSize).
func MarshalHeader(b []byte, h *Header) {
	_ = b[HeaderSize-1]
	copy(b[0:4], magic[:])
	binary.BigEndian.PutUint16(b[4:6], Version)
	b[6] = byte(h.Type)
	b[7] = h.Flags
	binary.BigEndian.PutUint64(b[8:16], h.Seq)
	binary.BigEndian.PutUint32(b[16:20], h.DeadlineMS)
	binary.BigEndian.PutUint32(b[20:24], h.Length)
	binary.BigEndian.PutUint32(b[24:28], h.Index)
	binary.BigEndian.PutUint32(b[28:32], h.Count)
	copy(b[32:64], h.Digest[:])
}

// DecodeHeader parses and validates a header. b must hold at least HeaderSize bytes.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, actuation.Refusef(actuation.CodeTruncatedFrame, "header of %d bytes", len(b))
	}
	if [4]byte(b[0:4]) != magic {
		return Header{}, actuation.Refusef(actuation.CodeBadMagic, "magic %q", b[0:4])
	}
	if v := binary.BigEndian.Uint16(b[4:6]); v != Version {
		return Header{}, actuation.Refusef(actuation.CodeUnsupportedVersion, "version %d (want %d)", v, Version)
	}
	h := Header{
		Type:       FrameType(b[6]),
		Flags:      b[7],
		Seq:        binary.BigEndian.Uint64(b[8:16]),
		DeadlineMS: binary.BigEndian.Uint32(b[16:20]),
		Length:     binary.BigEndian.Uint32(b[20:24]),
		Index:      binary.BigEndian.Uint32(b[24:28]),
		Count:      binary.BigEndian.Uint32(b[28:32]),
		Digest:     [32]byte(b[32:64]),
	}
	if err := h.Validate(); err != nil {
		return Header{}, err
	}
	return h, nil
}

// AppendFrame validates the frame (computing its digest) and appends its encoding to dst.
func AppendFrame(dst []byte, f *Frame) ([]byte, error) {
	if len(f.Payload) > MaxPayload {
		return dst, actuation.Refusef(actuation.CodeFrameTooLarge, "payload length %d exceeds %d", len(f.Payload), MaxPayload)
	}
	f.Length = uint32(len(f.Payload))
	f.Digest = sha256.Sum256(f.Payload)
	if err := f.Validate(); err != nil {
		return dst, err
	}
	var hb [HeaderSize]byte
	MarshalHeader(hb[:], &f.Header)
	dst = append(dst, hb[:]...)
	return append(dst, f.Payload...), nil
}

// WriteFrame encodes f (computing its digest) and writes it with a single Write.
func WriteFrame(w io.Writer, f *Frame) error {
	buf, err := AppendFrame(make([]byte, 0, HeaderSize+len(f.Payload)), f)
	if err != nil {
		return err
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write %s frame: %w", f.Type, err)
	}
	return nil
}

// ReadFrame reads one frame. The header is validated before the payload is allocated
// (at most MaxPayload bytes), and the payload's digest is checked. A clean end of stream
// before the first header byte returns io.EOF; an end inside a frame is refused as
// truncated-frame (wrapping io.ErrUnexpectedEOF).
func ReadFrame(r io.Reader) (Frame, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeTruncatedFrame, "stream ended inside a header"), err)
		}
		return Frame{}, err
	}
	h, err := DecodeHeader(hb[:])
	if err != nil {
		return Frame{}, err
	}
	payload := make([]byte, h.Length)
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeTruncatedFrame, "stream ended inside a %s payload", h.Type), io.ErrUnexpectedEOF)
		}
		return Frame{}, fmt.Errorf("read %s payload: %w", h.Type, err)
	}
	if sha256.Sum256(payload) != h.Digest {
		return Frame{}, actuation.Refusef(actuation.CodeDigestMismatch, "%s frame seq %d payload digest mismatch", h.Type, h.Seq)
	}
	return Frame{Header: h, Payload: payload}, nil
}

// DecodeFrame decodes exactly one frame from b (used by fuzzing and tests); trailing
// bytes are refused.
func DecodeFrame(b []byte) (Frame, error) {
	h, err := DecodeHeader(b)
	if err != nil {
		return Frame{}, err
	}
	if uint64(len(b)-HeaderSize) != uint64(h.Length) {
		return Frame{}, actuation.Refusef(actuation.CodeTruncatedFrame, "have %d payload bytes, header says %d", len(b)-HeaderSize, h.Length)
	}
	payload := b[HeaderSize:]
	if sha256.Sum256(payload) != h.Digest {
		return Frame{}, actuation.Refusef(actuation.CodeDigestMismatch, "payload digest mismatch")
	}
	return Frame{Header: h, Payload: append([]byte(nil), payload...)}, nil
}

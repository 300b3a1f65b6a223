package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"sensorium.dev/workbench/internal/actuation"
)

// DigestPrefix is the prefix of every digest string of the protocol.
const DigestPrefix = "sha256:"

// DigestOf returns "sha256:<hex>" of b.
func DigestOf(b []byte) string {
	s := sha256.Sum256(b)
	return DigestPrefix + hex.EncodeToString(s[:])
}

// ValidDigest reports whether s is "sha256:" followed by 64 lowercase hex digits.
func ValidDigest(s string) bool {
	if len(s) != len(DigestPrefix)+64 || !strings.HasPrefix(s, DigestPrefix) {
		return false
	}
	return isLowerHex(s[len(DigestPrefix):])
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ChunkCount is the number of chunk frames needed for n bytes.
func ChunkCount(n uint64) uint32 {
	return uint32((n + MaxPayload - 1) / MaxPayload)
}

// Bulk describes a transfer: its exact byte count and SHA-256. It travels in the JSON
// payload of the request or result the transfer belongs to; the chunk count travels in
// that frame's header.
type Bulk struct {
	Bytes  uint64 `json:"bytes"`
	Digest string `json:"digest"`
}

// CheckTransfer validates a declared transfer against the wire caps and the header's
// chunk count, before any chunk is read: count must be exactly the number of full-size
// chunks the byte count needs (so a peer cannot declare many tiny chunks), the total at
// most limit (itself at most MaxTransfer) and the digest well formed.
func CheckTransfer(b Bulk, count uint32, limit uint64) error {
	if limit > MaxTransfer {
		limit = MaxTransfer
	}
	if b.Bytes > limit {
		return actuation.Refusef(actuation.CodeTransferTooLarge, "transfer of %d bytes exceeds %d", b.Bytes, limit)
	}
	if count > MaxChunks {
		return actuation.Refusef(actuation.CodeTooManyChunks, "chunk count %d exceeds %d", count, MaxChunks)
	}
	if want := ChunkCount(b.Bytes); count != want {
		return actuation.Refusef(actuation.CodeTransferMismatch, "%d bytes need %d chunks, header declares %d", b.Bytes, want, count)
	}
	if !ValidDigest(b.Digest) {
		return actuation.Refusef(actuation.CodeMalformedPayload, "transfer digest %q is not sha256:<64 hex>", b.Digest)
	}
	return nil
}

// WriteTransfer writes data as chunk frames with sequence seq (the count was declared in
// the preceding request or result header).
func WriteTransfer(w io.Writer, seq uint64, data []byte) error {
	count := ChunkCount(uint64(len(data)))
	for i := uint32(0); i < count; i++ {
		end := min(int(i+1)*MaxPayload, len(data))
		f := Frame{Header: Header{Type: FrameChunk, Seq: seq, Index: i, Count: count}, Payload: data[int(i)*MaxPayload : end]}
		if err := WriteFrame(w, &f); err != nil {
			return fmt.Errorf("chunk %d/%d: %w", i, count, err)
		}
	}
	return nil
}

// FrameReader reads the next frame (ReadFrame over a connection, possibly with deadlines).
type FrameReader func() (Frame, error)

// ReadTransfer reads count chunk frames of transfer seq into sink, checking order, the
// running byte total against the declared one (never accepting a byte beyond it) and the
// final digest. It checks the declaration with CheckTransfer first. The sink receives
// bytes as they arrive; a caller that must publish nothing on failure writes to a
// temporary place and publishes only after a nil return.
func ReadTransfer(next FrameReader, seq uint64, b Bulk, count uint32, limit uint64, sink io.Writer) error {
	if err := CheckTransfer(b, count, limit); err != nil {
		return err
	}
	h := sha256.New()
	var got uint64
	for i := uint32(0); i < count; i++ {
		f, err := next()
		if err != nil {
			return fmt.Errorf("%w: chunk %d/%d: %w", actuation.Refusef(actuation.CodeTransferIncomplete, "transfer seq %d ended after %d of %d bytes", seq, got, b.Bytes), i, count, err)
		}
		if f.Type != FrameChunk || f.Seq != seq || f.Index != i || f.Count != count {
			return actuation.Refusef(actuation.CodeUnexpectedFrame, "want chunk %d/%d of seq %d, got %s seq %d index %d count %d", i, count, seq, f.Type, f.Seq, f.Index, f.Count)
		}
		if got+uint64(len(f.Payload)) > b.Bytes {
			return actuation.Refusef(actuation.CodeTransferMismatch, "chunks exceed the declared %d bytes", b.Bytes)
		}
		if i+1 < count && len(f.Payload) != MaxPayload {
			return actuation.Refusef(actuation.CodeTransferMismatch, "chunk %d of %d has %d bytes; only the last may be short", i, count, len(f.Payload))
		}
		got += uint64(len(f.Payload))
		h.Write(f.Payload)
		if _, err := sink.Write(f.Payload); err != nil {
			return fmt.Errorf("transfer seq %d: sink: %w", seq, err)
		}
	}
	if got != b.Bytes {
		return actuation.Refusef(actuation.CodeTransferMismatch, "received %d bytes, declared %d", got, b.Bytes)
	}
	if DigestPrefix+hex.EncodeToString(h.Sum(nil)) != b.Digest {
		return actuation.Refusef(actuation.CodeDigestMismatch, "transfer seq %d content digest mismatch", seq)
	}
	return nil
}

// LimitedBuffer is an io.Writer that refuses to grow beyond Max bytes. It never
// preallocates more than what was written.
type LimitedBuffer struct {
	Max int
	buf []byte
}

// Write implements io.Writer.
func (l *LimitedBuffer) Write(p []byte) (int, error) {
	if len(l.buf)+len(p) > l.Max {
		return 0, actuation.Refusef(actuation.CodeTransferTooLarge, "buffer limit %d bytes", l.Max)
	}
	l.buf = append(l.buf, p...)
	return len(p), nil
}

// Bytes returns what was written.
func (l *LimitedBuffer) Bytes() []byte { return l.buf }

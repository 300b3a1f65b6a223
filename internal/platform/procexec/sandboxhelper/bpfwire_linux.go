//go:build linux

package sandboxhelper

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"golang.org/x/sys/unix"
)

// BPFProgram is the seccomp filter as it travels to the helper in its configuration: one
// base64 string of the packed instructions (8 bytes each: code, jt, jf, k, little endian)
// instead of a JSON object per instruction. The sandbox's ~500 instructions took ~0.4 ms
// to encode in the agent and ~1 ms to decode in the helper per command as objects; as
// one string both are a few microseconds.
type BPFProgram []unix.SockFilter

// bpfInsnSize is the packed size of one instruction (struct sock_filter).
const bpfInsnSize = 8

// MaxBPFInsns bounds a decoded program (BPF_MAXINSNS, the kernel's own limit).
const MaxBPFInsns = 4096

// MarshalJSON implements json.Marshaler.
func (p BPFProgram) MarshalJSON() ([]byte, error) {
	raw := make([]byte, len(p)*bpfInsnSize)
	for i, f := range p {
		b := raw[i*bpfInsnSize:]
		binary.LittleEndian.PutUint16(b, f.Code)
		b[2], b[3] = f.Jt, f.Jf
		binary.LittleEndian.PutUint32(b[4:], f.K)
	}
	return json.Marshal(base64.StdEncoding.EncodeToString(raw))
}

// UnmarshalJSON implements json.Unmarshaler.
func (p *BPFProgram) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("seccomp program: %w", err)
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("seccomp program: %w", err)
	}
	if len(raw)%bpfInsnSize != 0 || len(raw)/bpfInsnSize > MaxBPFInsns {
		return fmt.Errorf("seccomp program: %d bytes is not a whole program of at most %d instructions", len(raw), MaxBPFInsns)
	}
	out := make(BPFProgram, len(raw)/bpfInsnSize)
	for i := range out {
		b := raw[i*bpfInsnSize:]
		out[i] = unix.SockFilter{Code: binary.LittleEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.LittleEndian.Uint32(b[4:])}
	}
	*p = out
	return nil
}

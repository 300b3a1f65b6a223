package fsaccess

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"

	"sensorium.dev/workbench/internal/actuation"
)

// DigestPrefix is the only digest algorithm the node agent writes or accepts.
const DigestPrefix = "sha256:"

// DigestBytes returns "sha256:<lowercase hex>" of b.
func DigestBytes(b []byte) string {
	s := sha256.Sum256(b)
	return DigestPrefix + hex.EncodeToString(s[:])
}

// Digester streams bytes into a sha256 and formats the digest.
type Digester struct{ h hash.Hash }

// NewDigester returns an empty Digester.
func NewDigester() *Digester { return &Digester{h: sha256.New()} }

func (d *Digester) Write(p []byte) (int, error) { return d.h.Write(p) }

// Digest returns "sha256:<lowercase hex>" of everything written so far.
func (d *Digester) Digest() string { return DigestPrefix + hex.EncodeToString(d.h.Sum(nil)) }

// DigestReader hashes r to EOF and returns the digest and byte count.
func DigestReader(r io.Reader) (string, int64, error) {
	d := NewDigester()
	n, err := io.Copy(d, r)
	return d.Digest(), n, err
}

// ParseDigest checks that s is "sha256:" followed by exactly 64 lowercase hex
// characters and returns the hex part; otherwise it refuses with CodeDigestInvalid.
func ParseDigest(s string) (string, error) {
	if len(s) != len(DigestPrefix)+64 || s[:len(DigestPrefix)] != DigestPrefix {
		return "", actuation.Refusef(actuation.CodeDigestInvalid, "digest %q is not sha256:<64 lowercase hex>", s)
	}
	h := s[len(DigestPrefix):]
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", actuation.Refusef(actuation.CodeDigestInvalid, "digest %q is not sha256:<64 lowercase hex>", s)
		}
	}
	return h, nil
}

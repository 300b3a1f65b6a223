package actions

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/gowebpki/jcs"

	"sensorium.dev/workbench/internal/actuation"
)

// SpecDigestJSON is "sha256:<hex>" of the RFC 8785 canonical form of a catalog spec's JSON.
func SpecDigestJSON(specJSON []byte) (string, error) {
	c, err := jcs.Transform(specJSON)
	if err != nil {
		return "", fmt.Errorf("canonicalizing catalog spec: %w", err)
	}
	sum := sha256.Sum256(c)
	return actuation.DigestPrefix + hex.EncodeToString(sum[:]), nil
}

// SpecDigest digests a core catalog (the same bytes as the API spec's encoding).
func SpecDigest(c Catalog) (string, error) { return actuation.Digest(c) }

func digestBytes(d string) ([]byte, error) {
	h, ok := strings.CutPrefix(d, actuation.DigestPrefix)
	if !ok || !actuation.IsDigest(d) {
		return nil, fmt.Errorf("digest %q is not sha256:<64 lowercase hex>", d)
	}
	return hex.DecodeString(h)
}

// Sign returns the standard base64 Ed25519 signature over the 32 raw bytes of digest.
func Sign(priv ed25519.PrivateKey, digest string) (string, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return "", errors.New("private key is not an Ed25519 private key")
	}
	msg, err := digestBytes(digest)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg)), nil
}

// ParsePublicKey decodes a standard base64 32-byte Ed25519 public key.
func ParsePublicKey(b64 string) (ed25519.PublicKey, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("public key is not standard base64: %w", err)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key has %d bytes, want %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// Verify checks a standard base64 signature over digest with a base64 public key.
func Verify(pubB64, digest, sigB64 string) error {
	pub, err := ParsePublicKey(pubB64)
	if err != nil {
		return err
	}
	msg, err := digestBytes(digest)
	if err != nil {
		return err
	}
	sig, err := base64.StdEncoding.DecodeString(sigB64)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return errors.New("signature is not a standard base64 Ed25519 signature")
	}
	if !ed25519.Verify(pub, msg, sig) {
		return errors.New("signature does not verify")
	}
	return nil
}

// KeyID is "sha256:<hex>" of the raw public key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return actuation.DigestPrefix + hex.EncodeToString(sum[:])
}

// GenerateKey makes a key pair; the private key is returned as the standard base64 of its
// 32-byte seed (the file format of `kubectl workbench catalog keygen`).
func GenerateKey() (pubB64, seedB64 string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generating Ed25519 key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(pub), base64.StdEncoding.EncodeToString(priv.Seed()), nil
}

// ParsePrivateKey decodes a key file: the standard base64 of a 32-byte seed (whitespace
// around it ignored).
func ParsePrivateKey(text string) (ed25519.PrivateKey, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil {
		return nil, fmt.Errorf("key is not standard base64: %w", err)
	}
	if len(raw) != ed25519.SeedSize {
		return nil, fmt.Errorf("key has %d bytes, want a %d-byte Ed25519 seed", len(raw), ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(raw), nil
}

// PublicKeyOf returns the standard base64 public key of a private key.
func PublicKeyOf(priv ed25519.PrivateKey) string {
	return base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey))
}

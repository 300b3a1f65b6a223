package skills

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

func signedBundle(t *testing.T, priv ed25519.PrivateKey) (*Bundle, []byte) {
	t.Helper()
	d := standard(t, "ok\n")
	m := crystallize(t, d)
	b, err := Export(exportInput(d, m, nil), ExportOptions{Profile: RedactionTranscriptPII})
	if err != nil {
		t.Fatal(err)
	}
	if priv != nil {
		if err := Sign(b, priv); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, raw
}

func key(t *testing.T) (ed25519.PrivateKey, PinnedKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv, PinnedKey{Name: "release-key", PublicKey: base64.StdEncoding.EncodeToString(pub)}
}

// Signed bundles (seed v0.2): verified against pinned keys only; every way to pass off an
// unverified signature is refused with its code; unsigned bundles say so.
func TestSignedBundles(t *testing.T) {
	priv, pinned := key(t)
	other, otherPinned := key(t)
	b, raw := signedBundle(t, priv)
	if b.BundleVersion != BundleVersionSigned || !b.Signed || b.Signature == nil || b.Signature.Alg != SignatureAlgEd25519 {
		t.Fatalf("signed bundle header: %s %v %+v", b.BundleVersion, b.Signed, b.Signature)
	}
	if err := ValidateSchema(raw); err != nil {
		t.Fatalf("a signed bundle must validate against the schema: %v", err)
	}
	im, err := ImportWith(raw, ImportOptions{Signers: []PinnedKey{otherPinned, pinned}, RequireSignature: true})
	if err != nil || im.SignedBy != "release-key" {
		t.Fatalf("pinned key: %v %+v", err, im)
	}
	// No pinned key, or only another one: the signature cannot be verified.
	if _, err := Import(raw); actuation.CodeOf(err) != actuation.CodeBundleSignerUnknown {
		t.Fatalf("no pinned key: %v", err)
	}
	if _, err := ImportWith(raw, ImportOptions{Signers: []PinnedKey{otherPinned}}); actuation.CodeOf(err) != actuation.CodeBundleSignerUnknown {
		t.Fatalf("other key: %v", err)
	}
	var doc map[string]any
	mustDecode(t, raw, &doc)
	// A signature copied from another bundle signed by the same key: its hash differs.
	_, raw2 := signedBundle(t, priv)
	var doc2 map[string]any
	mustDecode(t, raw2, &doc2)
	doc["signature"] = doc2["signature"]
	if _, err := ImportWith(mustEncode(t, doc), ImportOptions{Signers: []PinnedKey{pinned}}); actuation.CodeOf(err) != actuation.CodeBundleSignatureInvalid {
		t.Fatalf("copied signature: %v", err)
	}
	// A signature by an unpinned key claiming the pinned key's id.
	forged, _ := signedBundle(t, other)
	sig := *forged.Signature
	sig.KeyID = b.Signature.KeyID
	doc["signature"] = sig
	if _, err := ImportWith(mustEncode(t, doc), ImportOptions{Signers: []PinnedKey{pinned}}); actuation.CodeOf(err) != actuation.CodeBundleSignatureInvalid {
		t.Fatalf("forged key id: %v", err)
	}
	// Content changed after signing: the hash no longer recomputes.
	tampered := bytes.Replace(raw, []byte(`"Build and greet"`), []byte(`"Build and greeT"`), 1)
	if _, err := ImportWith(tampered, ImportOptions{Signers: []PinnedKey{pinned}}); actuation.CodeOf(err) != actuation.CodeBundleHashMismatch {
		t.Fatalf("tampered signed bundle: %v", err)
	}
	// Stripping the signature from a signed (0.2.0) bundle, or claiming signed without one.
	mustDecode(t, raw, &doc)
	doc["signature"], doc["signed"] = nil, false
	if _, err := ImportWith(mustEncode(t, doc), ImportOptions{Signers: []PinnedKey{pinned}}); actuation.CodeOf(err) != actuation.CodeBundleSchemaInvalid {
		t.Fatalf("stripped signature: %v", err)
	}
	// Unsigned bundles: "signed": false plainly, refused where a signature is required.
	ub, uraw := signedBundle(t, nil)
	if ub.Signed || ub.Signature != nil || ub.BundleVersion != BundleVersion || !bytes.Contains(uraw, []byte(`"signed": false`)) || !bytes.Contains(uraw, []byte(`"signature": null`)) {
		t.Fatalf("unsigned bundle header: %s", uraw[:200])
	}
	if _, err := ImportWith(uraw, ImportOptions{Signers: []PinnedKey{pinned}, RequireSignature: true}); actuation.CodeOf(err) != actuation.CodeBundleSignatureRequired {
		t.Fatalf("unsigned where required: %v", err)
	}
	if im, err := ImportWith(uraw, ImportOptions{Signers: []PinnedKey{pinned}}); err != nil || im.SignedBy != "" {
		t.Fatalf("unsigned: %v %+v", err, im)
	}
	// Signing does not change what the content hash covers: the unsigned content of a
	// signed bundle hashes the same way (signature and signed are outside the hash).
	c1, _ := CanonicalTyped(b)
	bb := *b
	bb.Signature, bb.Signed = nil, false
	c2, _ := CanonicalTyped(&bb)
	if !bytes.Equal(c1, c2) {
		t.Fatal("signature members entered the canonical form")
	}
}

func mustDecode(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

func mustEncode(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

package actuation

// PatchDigest is the content digest a FilePatch declares: for a unified
// patch given inline (unifiedPatch non-nil), "sha256:<hex>" of its bytes;
// otherwise the canonical digest (Digest) of its structured operations. The
// webhook checks spec.digest against it and the skill replay controller
// stamps it on the patches it creates: one rule, here.
func PatchDigest(unifiedPatch *string, operations any) (string, error) {
	if unifiedPatch != nil {
		return DigestBytes([]byte(*unifiedPatch)), nil
	}
	return Digest(operations)
}

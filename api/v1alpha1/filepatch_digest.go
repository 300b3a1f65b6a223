package v1alpha1

// InlineUnifiedPatch returns the inline unified diff whose bytes the patch's
// digest covers, or nil when the digest covers the structured operations
// (actuation.PatchDigest is the rule).
func (s *FilePatchSpec) InlineUnifiedPatch() *string {
	if s.Format == PatchFormatUnified && s.Patch != nil {
		return s.Patch
	}
	return nil
}

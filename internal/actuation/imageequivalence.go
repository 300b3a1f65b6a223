package actuation

// ImageEquivalence is what makes two variants of one image the same system (the seed's
// equivalence fields): the userspace (rootfs) digest, the SBOM generated from the image's
// own package database, the build provenance (its reference and digest), and the guest
// agent and protocol digests.
type ImageEquivalence struct {
	Userspace, SBOM, Provenance, ProvenanceRef, Agent, Protocol string
}

// MissingImageEquivalence lists the equivalence fields a manifest with a full-system
// variant (one that boots a disk) lacks, in a fixed order; a manifest missing any is
// refused (image-invalid), by admission and again by the node before a boot. The minimal
// initramfs image claims no full-system fidelity and is not held to it.
func MissingImageEquivalence(e ImageEquivalence) []string {
	var out []string
	for _, f := range []struct{ name, v string }{
		{"spec.digests.userspace", e.Userspace}, {"spec.digests.sbom", e.SBOM},
		{"spec.digests.provenance", e.Provenance}, {"spec.digests.provenanceRef", e.ProvenanceRef},
		{"spec.digests.agent", e.Agent}, {"spec.digests.protocol", e.Protocol},
	} {
		if f.v == "" {
			out = append(out, f.name)
		}
	}
	return out
}

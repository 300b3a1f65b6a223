package backends

// SourceMaterializer is implemented by a backend that materializes workspace sources (git,
// archive, oci; docs/workspace-sources.md) into an environment's roots: Allocate fills a
// Root whose Materialize is set (fixture-copy.v1 into the managed copy, qemu-microvm.v1
// into the working disk of a full-system variant). A backend without it, or answering
// false, takes no sourced root: the node refuses one with source-backend-unsupported
// before anything is fetched.
type SourceMaterializer interface {
	MaterializesSources() bool
}

// MaterializesSources says whether b materializes workspace sources (SourceMaterializer).
func MaterializesSources(b Backend) bool {
	m, ok := b.(SourceMaterializer)
	return ok && m.MaterializesSources()
}

// SourceMaterializers lists (sorted) the registered backends that materialize workspace
// sources.
func (r *Registry) SourceMaterializers() []string {
	var out []string
	for _, id := range r.IDs() {
		if MaterializesSources(r.byID[id]) {
			out = append(out, id)
		}
	}
	return out
}

// PIDsBounder is implemented by a backend that bounds resources.pids for spec: through
// the cgroup of every command and session on the host (host-local, fixture-copy.v1), or
// through the guest agent's own cgroup per command in a full-system VM variant
// (qemu-microvm.v1 with a boot disk). A backend without it, or answering false, does not
// bound the processes of spec's environment: the node refuses resources.pids there
// (resource-not-enforced) instead of accepting and ignoring it.
type PIDsBounder interface {
	BoundsPIDs(spec Spec) bool
}

// BoundsPIDs says whether b bounds resources.pids for spec (PIDsBounder).
func BoundsPIDs(b Backend, spec Spec) bool {
	p, ok := b.(PIDsBounder)
	return ok && p.BoundsPIDs(spec)
}

// BootVariant is what an ImageManifest variant must be for a VM backend to boot it: its
// guest architecture ("x86_64", "arm64") and whether it boots through EFI from a raw disk
// (EFIBootImage) or directly from a kernel and an initrd (BootImage).
type BootVariant struct {
	Architecture string
	EFI          bool
}

// ImageBooter is implemented by a VM backend that boots an environment's ImageManifest
// (spec.imageRef): the node resolves the manifest's variant for the backend by BootVariant
// and hands it over as Spec.Boot or Spec.EFI. A backend without it boots nothing (no
// imageRef needed).
type ImageBooter interface {
	BootVariant() BootVariant
}

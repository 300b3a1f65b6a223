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

package actuation

import "slices"

// Backend identities (spec.backend) that this build knows by name.
const (
	BackendHostLocal       = "host-local"
	BackendFixtureCopy     = "fixture-copy.v1"
	BackendQEMUMicroVM     = "qemu-microvm.v1"
	BackendVfkitSystem     = "vfkit-system.v1"
	BackendCloudHypervisor = "cloud-hypervisor-system.v1"
	BackendFirecracker     = "firecracker-system.v1"
)

// implementedBackends are the backends some node agent of this build runs: host-local,
// fixture-copy.v1 and qemu-microvm.v1 on Linux nodes, vfkit-system.v1 on macOS nodes
// (internal/backends/vfkitsystem, darwin only). The others the API names
// (cloud-hypervisor-system.v1, firecracker-system.v1) have a place in the backend port and
// no implementation: no node can ever offer them.
//
// Why a static list and not "some BackendCapability offers it": admission must be a
// function of the object and the build, not of which node agents happen to be heartbeating
// at the moment a manifest is applied (a node restarting, a GitOps apply racing the first
// node's registration, would otherwise turn the same object from admitted to refused and
// back), and a capability is written by a node, so a node claiming a backend no code
// implements must not make admission accept it. Whether an implemented backend has a node
// right now is placement's question: such an Environment waits with capability-mismatch
// until a node attests a matching capability (a macOS node for vfkit-system.v1).
var implementedBackends = []string{BackendHostLocal, BackendFixtureCopy, BackendQEMUMicroVM, BackendVfkitSystem}

// ImplementedBackends returns the backends this build runs, sorted.
func ImplementedBackends() []string {
	out := slices.Clone(implementedBackends)
	slices.Sort(out)
	return out
}

// CheckBackendOffered refuses, with backend-not-offered, a backend no node of this build can
// offer. An empty id is left to the field's own validation.
func CheckBackendOffered(id string) *Refusal {
	if id == "" || slices.Contains(implementedBackends, id) {
		return nil
	}
	return Refuse(CodeBackendNotOffered, "spec.backend",
		"no node can offer backend %q: this build has no implementation of it (implemented: %v); the Environment would never be placed", id, ImplementedBackends())
}

// Package backends defines the EnvironmentBackend port of the node agent. Each backend
// (host-local, fixture-copy.v1, qemu-microvm.v1, later cloud-hypervisor-system.v1 and
// vfkit-system.v1) implements it in its own package; the node agent picks one by the
// environment's spec.backend through a Registry. Backends know nothing of Kubernetes.
package backends

import (
	"context"
	"fmt"
	"sort"
)

// Root is one named root of an environment as the node agent resolved it.
type Root struct {
	Name     string // root name from the spec
	HostPath string // host-local: the admitted directory
	Source   string // fixture-copy.v1: the directory copied
	ReadOnly bool
	// SourceID and Materialize: a root from a workspace source (git, archive, oci; issue
	// 28), fixture-copy.v1 only. Materialize fills the empty managed copy; SourceID
	// identifies the source (a complete copy of the same SourceID is reused as is).
	SourceID    string
	Materialize MaterializeFunc `json:"-"`
}

// Spec is the backend-neutral description of one environment allocation.
type Spec struct {
	// ID is stable for the environment's lifetime (the object's UID).
	ID string
	// Ref is namespace/name, for messages.
	Ref string
	// Generation is the source generation; a new boot or allocation advances it.
	Generation int64
	// PlanDigest binds the allocation to the manager's normalized plan.
	PlanDigest string
	Roots      []Root
	VCPUs      int32
	MemoryMiB  int32
	DiskMiB    int32
	PIDs       int32
	ImageRef   string
	// Boot is the boot image of a VM backend, resolved by the node agent from the
	// environment's ImageManifest variant for this backend (nil for processless backends).
	// The backend verifies every digest before it boots.
	Boot *BootImage
	// EFI is the EFI boot variant of an EFI-booting VM backend (vfkit-system.v1); nil otherwise.
	EFI *EFIBootImage
	// KeepDisk keeps a VM's working disk at teardown (spec.teardown RetainArtifacts);
	// otherwise teardown deletes it.
	KeepDisk bool
}

// BootImage is one direct-kernel boot variant of an ImageManifest. Paths are relative to
// the backend's image directory (the node operator's configuration), never host paths
// chosen by a caller; the backend resolves them beneath that directory.
type BootImage struct {
	// Variant is the ImageManifest variant's name (for messages and the recovery record).
	Variant      string
	KernelPath   string
	KernelDigest string // sha256:<hex>
	InitrdPath   string
	InitrdDigest string // sha256:<hex>
	// CommandLine is the variant's kernel command line; the backend may append
	// accelerator-specific options of its own.
	CommandLine string
	// DiskPath and DiskDigest name the variant's raw root disk (full-system variants): the
	// pinned immutable base each environment's working disk is cloned from ("" without).
	DiskPath   string
	DiskDigest string // sha256:<hex>
}

// Phase of an environment as the backend observes it.
type Phase string

// Backend phases.
const (
	PhaseAllocating Phase = "Allocating"
	PhaseReady      Phase = "Ready"
	PhaseDraining   Phase = "Draining"
	PhaseClosed     Phase = "Closed"
	PhaseFailed     Phase = "Failed"
)

// MountedRoot is a root ready for file access and command working directories.
type MountedRoot struct {
	Name     string
	Path     string // directory on the host (host-local: the admitted path; fixture-copy: the managed copy); "" for VM backends
	ReadOnly bool
	// GuestDir is set by VM backends instead of Path: the root's directory relative to the
	// guest agent's root (/workspace in the reference image). It is never a host path.
	GuestDir string
}

// Status is what Inspect observes, freshly (never a remembered flag).
type Status struct {
	Phase   Phase
	Roots   []MountedRoot
	Message string
	// Residue lists resources still present after Teardown (empty when clean).
	Residue []string
	// Generation is the source generation of the running boot (VM backends; 0 for
	// processless backends). Every new boot advances it; an adopted boot keeps it.
	Generation int64
}

// RecoveryAction is one action of a recovery sweep.
type RecoveryAction struct {
	Resource string
	Outcome  string // recovered, terminated, quarantined, failed-retryable, failed-permanent, expired, unknown
	Message  string
}

// Backend is the EnvironmentBackend port: allocate, start, inspect, drain, teardown,
// recover. Every method is idempotent for the same Spec.ID.
type Backend interface {
	// ID is the backend identifier (spec.backend), e.g. "host-local".
	ID() string
	// Allocate prepares the environment's resources (copies, disks, sockets).
	Allocate(ctx context.Context, spec Spec) (Status, error)
	// Start boots what needs booting (a VM); a processless backend is Ready after Allocate.
	Start(ctx context.Context, spec Spec) (Status, error)
	// Inspect observes the environment now.
	Inspect(ctx context.Context, spec Spec) (Status, error)
	// Drain stops accepting new work; existing work may finish.
	Drain(ctx context.Context, spec Spec) (Status, error)
	// Teardown removes everything the backend created for the environment, and nothing else.
	Teardown(ctx context.Context, spec Spec) (Status, error)
	// Recover sweeps what a previous agent process left: known is the set of environment
	// IDs the store still records as live; everything else of this backend is removed or
	// quarantined.
	Recover(ctx context.Context, known map[string]Spec) ([]RecoveryAction, error)
	// Open returns environment id's executor and file access (env.go): the one place that
	// says whether its processes and roots live on the host or in a guest. It observes
	// nothing (a guest Env dials on use); a backend that offers neither refuses
	// (capability-mismatch).
	Open(id string) (Env, error)
}

// Registry picks a backend by id.
type Registry struct{ byID map[string]Backend }

// NewRegistry registers backends; a duplicate id is an error.
func NewRegistry(bs ...Backend) (*Registry, error) {
	r := &Registry{byID: map[string]Backend{}}
	for _, b := range bs {
		if _, dup := r.byID[b.ID()]; dup {
			return nil, fmt.Errorf("backend %q registered twice", b.ID())
		}
		r.byID[b.ID()] = b
	}
	return r, nil
}

// Get returns the backend for id.
func (r *Registry) Get(id string) (Backend, bool) {
	b, ok := r.byID[id]
	return b, ok
}

// IDs lists the registered backends, sorted.
func (r *Registry) IDs() []string {
	ids := make([]string, 0, len(r.byID))
	for id := range r.byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Adopter is implemented by backends that can move a ready instance from one environment ID
// to another (a warm pool member adopted by its claimer, docs/pools.md). After Adopt the
// instance answers only to to.ID; nothing remains under from.ID, and a later Allocate of
// to finds the instance complete. Backends without it allocate the claimer afresh.
type Adopter interface {
	Adopt(ctx context.Context, from, to Spec) error
}

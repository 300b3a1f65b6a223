package environments

import (
	"fmt"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
)

// DiskBackend is a backend that bounds an environment's disk (fixture-copy.v1).
type DiskBackend interface {
	EnforcesDisk() bool
	DiskBound(spec backends.Spec) int64
	Storage() (used, capacity int64, disks int, err error)
}

// EnforcesDisk reports whether b bounds resources.diskMiB.
func EnforcesDisk(b backends.Backend) bool {
	d, ok := b.(DiskBackend)
	return ok && d.EnforcesDisk()
}

// unenforcedResources refuses (resource-not-enforced) an Environment that asks for a limit
// its backend cannot enforce, instead of accepting and ignoring it:
//   - diskMiB where the backend bounds no disk (diskEnforced false): host-local roots are
//     the operator's own directories, and the VM backend boots from an initramfs with no
//     disk; fixture-copy.v1 enforces it as the size of the environment's own disk
//     (storage.go), unless the node cannot make disks;
//   - pids on qemu-microvm.v1: the guest's process count is not bounded by the host (the
//     VMM's own cgroup bounds QEMU's threads, not the guest's processes).
//
// pids, memoryMiB and vcpus on host-local and fixture-copy.v1 bound every command and
// session through its cgroup (environmentLimits).
//
// A full-system VM variant (a boot image with a raw disk) enforces both: diskMiB is its
// working disk's fixed virtual size under the node's storage reservation, and pids bounds
// every guest command through its own cgroup inside the guest (the guest agent's limits).
func unenforcedResources(backend string, s backends.Spec, diskEnforced bool) (code, msg string) {
	if s.Boot != nil && s.Boot.DiskPath != "" {
		diskEnforced = true
		if backend == string(wbv1.BackendQEMUMicroVM) {
			return "", ""
		}
	}
	switch {
	case s.DiskMiB > 0 && !diskEnforced:
		return string(actuation.CodeResourceNotEnforced), fmt.Sprintf("resources.diskMiB (%d) is not enforced by %s on this node; leave it unset", s.DiskMiB, backend)
	case s.PIDs > 0 && backend != string(wbv1.BackendHostLocal) && backend != string(wbv1.BackendFixtureCopy):
		return string(actuation.CodeResourceNotEnforced), fmt.Sprintf("resources.pids (%d) is not enforced inside %s guests; leave it unset", s.PIDs, backend)
	}
	return "", ""
}

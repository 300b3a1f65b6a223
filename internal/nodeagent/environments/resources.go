package environments

import (
	"fmt"

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

// unenforcedResources refuses (resource-not-enforced) an Environment that asks backend b
// for a limit it cannot enforce, instead of accepting and ignoring it:
//   - diskMiB where the backend bounds no disk (diskEnforced false): host-local roots are
//     the operator's own directories, and the VM backend boots from an initramfs with no
//     disk; fixture-copy.v1 enforces it as the size of the environment's own disk
//     (storage.go), unless the node cannot make disks. A full-system VM variant (a boot
//     image with a raw disk) enforces it as its working disk's fixed virtual size under
//     the node's storage reservation;
//   - pids where the backend does not bound them (its own answer, backends.BoundsPIDs):
//     host-local and fixture-copy.v1 bound every command and session through its cgroup
//     (environmentLimits), a full-system qemu-microvm.v1 variant every guest command
//     through its own cgroup inside the guest; elsewhere the guest's process count is not
//     bounded by the host (the VMM's own cgroup bounds QEMU's threads, not the guest's
//     processes).
//
// memoryMiB and vcpus on host-local and fixture-copy.v1 bound every command and session
// through its cgroup (environmentLimits).
func unenforcedResources(b backends.Backend, s backends.Spec, diskEnforced bool) (code, msg string) {
	if s.Boot != nil && s.Boot.DiskPath != "" {
		diskEnforced = true
	}
	switch {
	case s.DiskMiB > 0 && !diskEnforced:
		return string(actuation.CodeResourceNotEnforced), fmt.Sprintf("resources.diskMiB (%d) is not enforced by %s on this node; leave it unset", s.DiskMiB, b.ID())
	case s.PIDs > 0 && !backends.BoundsPIDs(b, s):
		return string(actuation.CodeResourceNotEnforced), fmt.Sprintf("resources.pids (%d) is not enforced inside %s guests; leave it unset", s.PIDs, b.ID())
	}
	return "", ""
}

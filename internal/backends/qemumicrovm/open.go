package qemumicrovm

import (
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/guestenv"
)

// Open returns the guest Env of environment id: its commands, PTY programs and roots live
// in the VM's guest, reached through this backend's broker (Guest, GuestChannel).
func (b *Backend) Open(id string) (backends.Env, error) { return guestenv.Open(b, id), nil }

// MaterializesSources: a sourced root is filled into the working disk of a full-system
// variant (sources.go); a variant without a disk refuses it at Allocate.
func (b *Backend) MaterializesSources() bool { return true }

// BoundsPIDs: a full-system variant (a boot image with a raw disk) bounds every guest
// command through its own cgroup inside the guest (the guest agent's limits); the minimal
// initramfs variant does not, and the host bounds only QEMU's threads, not the guest's
// processes.
func (b *Backend) BoundsPIDs(spec backends.Spec) bool {
	return spec.Boot != nil && spec.Boot.DiskPath != ""
}

// BootVariant: qemu-system-x86_64 boots a direct-kernel x86_64 variant (its capability's
// guestArchitecture and bootMode).
func (b *Backend) BootVariant() backends.BootVariant {
	return backends.BootVariant{Architecture: "x86_64"}
}

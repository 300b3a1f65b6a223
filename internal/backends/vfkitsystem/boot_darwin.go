//go:build darwin

package vfkitsystem

import "sensorium.dev/workbench/internal/backends"

// BootVariant: vfkit-system.v1 boots the arm64 EFI variant from its raw disk (its
// capability's guestArchitecture and bootMode).
func (b *Backend) BootVariant() backends.BootVariant {
	return backends.BootVariant{Architecture: "arm64", EFI: true}
}

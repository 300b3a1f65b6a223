package vfkitsystem

import "sensorium.dev/workbench/internal/actuation"

// Capability is the descriptor a macOS node attests for this backend: hardware-vm (Apple's
// Virtualization framework runs guests under the hypervisor, never emulated), a full-system
// arm64 guest booted through EFI from a raw disk, exactly the closed device profile, no
// NIC, no host share, no credential injection, a diagnostic output-only console.
// version and binaryDigest describe the node agent binary the framework runs in (the
// framework itself is the OS's: platformRef carries the macOS version).
func Capability(version, binaryDigest, macOSVersion string) actuation.Capability {
	return actuation.Capability{
		BackendID: ID, Provider: "apple-virtualization", Version: version, BinaryDigest: binaryDigest,
		PlatformRef: "macos-vz-arm64.v1/" + macOSVersion,
		Locality:    "local-only", HostArchitecture: "arm64", GuestArchitecture: "arm64",
		IsolationClass: "hardware-vm", SystemFidelity: "full-system-linux",
		ControlTransport: "virtio-vsock", ControlGuestEndpoint: "af-vsock", ControlHostEndpoint: "unix-domain-socket",
		ControlChannelBinding: "environment-generation-boot-nonce", BootMode: "efi",
		StorageFormats: []string{DiskFormatRaw}, DeviceClasses: append([]string(nil), Profile...), ConsoleMode: "diagnostic-output-only",
		NetworkProfiles: []string{"none"}, HostFilesystemSharing: "denied", CredentialInjection: "denied",
		// The framework bounds vCPUs, memory and the disk's virtual size; there are no
		// host cgroups on macOS, so host-cpu/host-memory are not claimed.
		ResourceEnforcement: []string{"guest-vcpu", "guest-memory", "guest-storage", "channel-bounds"},
		LifecycleOperations: []string{"allocate", "start", "inspect", "drain", "teardown", "recover"},
	}
}

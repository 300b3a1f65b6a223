package actuation

import "slices"

// Dimension is one semantic dimension of sensorium-virt-backend-capabilities.v1
// (seed 000 §7.1). Its string is also the JSON name of the matching
// Capability field.
type Dimension string

// The semantic dimensions.
const (
	DimLocality              Dimension = "locality"
	DimHostArchitecture      Dimension = "hostArchitecture"
	DimGuestArchitecture     Dimension = "guestArchitecture"
	DimIsolationClass        Dimension = "isolationClass"
	DimSystemFidelity        Dimension = "systemFidelity"
	DimControlTransport      Dimension = "controlTransport"
	DimControlGuestEndpoint  Dimension = "controlGuestEndpoint"
	DimControlHostEndpoint   Dimension = "controlHostEndpoint"
	DimControlChannelBinding Dimension = "controlChannelBinding"
	DimBootMode              Dimension = "bootMode"
	DimStorageFormats        Dimension = "storageFormats"
	DimDeviceClasses         Dimension = "deviceClasses"
	DimConsoleMode           Dimension = "consoleMode"
	DimNetworkProfiles       Dimension = "networkProfiles"
	DimHostFilesystemSharing Dimension = "hostFilesystemSharing"
	DimCredentialInjection   Dimension = "credentialInjection"
	DimResourceEnforcement   Dimension = "resourceEnforcement"
	DimLifecycleOperations   Dimension = "lifecycleOperations"

	// DimBackendID names the backend identity in Unmet. It is not a semantic
	// dimension: identities resolve through host registries, so it has no
	// vocabulary and no equivalences.
	DimBackendID Dimension = "backendID"
)

// vocabularies is the closed V1 vocabulary, exactly the seed's table plus
// isolationClass "emulated-vm", which DESIGN §7 adds for a full-system VM
// under software emulation (TCG); the design document wins over the seed.
var vocabularies = map[Dimension][]string{
	DimLocality:              {"local-only", "remote-sandbox"},
	DimHostArchitecture:      {"x86_64", "arm64"},
	DimGuestArchitecture:     {"x86_64", "arm64"},
	DimIsolationClass:        {"none", "process-sandbox", "shared-kernel-container", "hardware-vm", "emulated-vm"},
	DimSystemFidelity:        {"filesystem-view", "process-runtime", "shared-kernel-linux", "full-system-linux"},
	DimControlTransport:      {"none", "local-process", "virtio-vsock"},
	DimControlGuestEndpoint:  {"none", "af-vsock"},
	DimControlHostEndpoint:   {"none", "af-vsock", "unix-domain-socket"},
	DimControlChannelBinding: {"none", "environment-generation-boot-nonce"},
	DimBootMode:              {"none", "efi", "direct-kernel"},
	DimStorageFormats:        {"directory-copy", "raw", "kernel-initrd-rootfs"},
	DimDeviceClasses:         {"virtio-block", "virtio-vsock", "virtio-rng", "diagnostic-serial", "virtio-net"},
	DimConsoleMode:           {"none", "diagnostic-output-only"},
	DimNetworkProfiles:       {"none", "isolated", "egress-allowlisted"},
	DimHostFilesystemSharing: {"denied", "read-only", "read-write"},
	DimCredentialInjection:   {"denied", "explicit-scoped"},
	DimResourceEnforcement: {"host-cpu", "host-memory", "host-process", "host-storage", "host-io",
		"guest-vcpu", "guest-memory", "guest-pids", "guest-storage", "channel-bounds"},
	DimLifecycleOperations: {"allocate", "start", "inspect", "drain", "teardown", "recover"},
}

// setDimensions are the set-valued dimensions of a Capability.
var setDimensions = map[Dimension]bool{
	DimStorageFormats: true, DimDeviceClasses: true, DimNetworkProfiles: true,
	DimResourceEnforcement: true, DimLifecycleOperations: true,
}

// Dimensions returns the semantic dimensions in the seed's order.
func Dimensions() []Dimension {
	return []Dimension{
		DimLocality, DimHostArchitecture, DimGuestArchitecture, DimIsolationClass, DimSystemFidelity,
		DimControlTransport, DimControlGuestEndpoint, DimControlHostEndpoint, DimControlChannelBinding,
		DimBootMode, DimStorageFormats, DimDeviceClasses, DimConsoleMode, DimNetworkProfiles,
		DimHostFilesystemSharing, DimCredentialInjection, DimResourceEnforcement, DimLifecycleOperations,
	}
}

// Vocabulary returns the closed values of d (a copy), or nil for an unknown
// dimension (including DimBackendID).
func Vocabulary(d Dimension) []string {
	v, ok := vocabularies[d]
	if !ok {
		return nil
	}
	return slices.Clone(v)
}

// IsAdmittedValue reports whether v is a closed value of d.
func IsAdmittedValue(d Dimension, v string) bool {
	return slices.Contains(vocabularies[d], v)
}

// IsSetDimension reports whether d is set-valued in a Capability.
func IsSetDimension(d Dimension) bool { return setDimensions[d] }

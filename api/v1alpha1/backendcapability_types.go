package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Locality says whether a backend runs on the node itself or in a remote sandbox.
// +kubebuilder:validation:Enum=local-only;remote-sandbox
type Locality string

const (
	// LocalityLocalOnly: the backend runs on the node itself.
	LocalityLocalOnly Locality = "local-only"
	// LocalityRemoteSandbox: the backend runs in a remote sandbox.
	LocalityRemoteSandbox Locality = "remote-sandbox"
)

// Architecture is a CPU architecture of a host, guest or image variant.
// +kubebuilder:validation:Enum=x86_64;arm64
type Architecture string

const (
	// ArchitectureX8664 is 64-bit x86 (x86_64, amd64).
	ArchitectureX8664 Architecture = "x86_64"
	// ArchitectureARM64 is 64-bit ARM (arm64, aarch64).
	ArchitectureARM64 Architecture = "arm64"
)

// ControlTransport is how the node agent reaches an environment's control endpoint.
// +kubebuilder:validation:Enum=none;local-process;virtio-vsock
type ControlTransport string

const (
	// ControlTransportNone: the backend has no control endpoint.
	ControlTransportNone ControlTransport = "none"
	// ControlTransportLocalProcess: the control endpoint is a local process.
	ControlTransportLocalProcess ControlTransport = "local-process"
	// ControlTransportVirtioVsock: the control endpoint is reached over virtio-vsock.
	ControlTransportVirtioVsock ControlTransport = "virtio-vsock"
)

// ControlGuestEndpoint is the kind of the control endpoint inside a guest.
// +kubebuilder:validation:Enum=none;af-vsock
type ControlGuestEndpoint string

const (
	// ControlGuestEndpointNone: there is no control endpoint in the guest.
	ControlGuestEndpointNone ControlGuestEndpoint = "none"
	// ControlGuestEndpointAFVsock: the guest listens on an AF_VSOCK socket.
	ControlGuestEndpointAFVsock ControlGuestEndpoint = "af-vsock"
)

// ControlHostEndpoint is the kind of the control endpoint on the host.
// +kubebuilder:validation:Enum=none;af-vsock;unix-domain-socket
type ControlHostEndpoint string

const (
	// ControlHostEndpointNone: there is no control endpoint on the host.
	ControlHostEndpointNone ControlHostEndpoint = "none"
	// ControlHostEndpointAFVsock: the host connects over an AF_VSOCK socket.
	ControlHostEndpointAFVsock ControlHostEndpoint = "af-vsock"
	// ControlHostEndpointUnixDomainSocket: the host connects over a Unix domain socket.
	ControlHostEndpointUnixDomainSocket ControlHostEndpoint = "unix-domain-socket"
)

// ControlChannelBinding is what a control channel is bound to, so a stale guest cannot
// answer for a new one.
// +kubebuilder:validation:Enum=none;environment-generation-boot-nonce
type ControlChannelBinding string

const (
	// ControlChannelBindingNone: the control channel is not bound.
	ControlChannelBindingNone ControlChannelBinding = "none"
	// ControlChannelBindingEnvironmentGenerationBootNonce: the control channel is bound to
	// the environment's generation and a per-boot nonce.
	ControlChannelBindingEnvironmentGenerationBootNonce ControlChannelBinding = "environment-generation-boot-nonce"
)

// BackendBootMode is how a backend boots a guest; none for backends that boot none.
// +kubebuilder:validation:Enum=none;efi;direct-kernel
type BackendBootMode string

const (
	// BackendBootModeNone: the backend boots no guest.
	BackendBootModeNone BackendBootMode = "none"
	// BackendBootModeEFI: the backend boots the guest through EFI firmware.
	BackendBootModeEFI BackendBootMode = "efi"
	// BackendBootModeDirectKernel: the backend boots a kernel directly.
	BackendBootModeDirectKernel BackendBootMode = "direct-kernel"
)

// ConsoleMode says what a backend's console may be used for.
// +kubebuilder:validation:Enum=none;diagnostic-output-only
type ConsoleMode string

const (
	// ConsoleModeNone: the backend has no console.
	ConsoleModeNone ConsoleMode = "none"
	// ConsoleModeDiagnosticOutputOnly: the console carries diagnostic output only.
	ConsoleModeDiagnosticOutputOnly ConsoleMode = "diagnostic-output-only"
)

// BackendCapabilitySpec is the closed, host-attested descriptor of one backend on one node
// (sensorium-virt-backend-capabilities.v1). Every semantic value comes from a closed,
// versioned vocabulary; unknown values are refused.
type BackendCapabilitySpec struct {
	// nodeName is the node whose agent attests this descriptor.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`
	// backendID identifies the backend implementation this capability describes.
	// +required
	BackendID BackendID `json:"backendID"`
	// provider names who provides the backend.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Provider string `json:"provider"`
	// version is the backend's version.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Version string `json:"version"`
	// binaryDigest of the agent or VMM binary that provides the backend.
	// +optional
	BinaryDigest Digest `json:"binaryDigest,omitempty"`
	// platformRef names the platform the backend runs on, when it depends on one.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	PlatformRef string `json:"platformRef,omitempty"`
	// locality says whether the backend runs on the node itself or in a remote sandbox.
	// +required
	Locality Locality `json:"locality"`
	// hostArchitecture is the CPU architecture of the host the backend runs on.
	// +required
	HostArchitecture Architecture `json:"hostArchitecture"`
	// guestArchitecture is the CPU architecture inside the guest, for backends that boot one.
	// +optional
	GuestArchitecture Architecture `json:"guestArchitecture,omitempty"`
	// isolationClass is the isolation the backend gives an environment.
	// +required
	IsolationClass IsolationClass `json:"isolationClass"`
	// systemFidelity says how close the backend's system is to a real machine.
	// +required
	SystemFidelity SystemFidelity `json:"systemFidelity"`
	// controlTransport is how the node agent reaches the environment's control endpoint.
	// +required
	ControlTransport ControlTransport `json:"controlTransport"`
	// controlGuestEndpoint is the control endpoint's kind inside the guest.
	// +optional
	ControlGuestEndpoint ControlGuestEndpoint `json:"controlGuestEndpoint,omitempty"`
	// controlHostEndpoint is the control endpoint's kind on the host.
	// +optional
	ControlHostEndpoint ControlHostEndpoint `json:"controlHostEndpoint,omitempty"`
	// controlChannelBinding is what the control channel is bound to, so a stale guest cannot
	// answer for a new one.
	// +optional
	ControlChannelBinding ControlChannelBinding `json:"controlChannelBinding,omitempty"`
	// bootMode is how the backend boots a guest.
	// +optional
	BootMode BackendBootMode `json:"bootMode,omitempty"`
	// storageFormats are the disk image formats the backend accepts.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	// +kubebuilder:validation:items:Enum=directory-copy;raw;kernel-initrd-rootfs
	StorageFormats []string `json:"storageFormats,omitempty"`
	// deviceClasses are the classes of device the backend exposes to a guest.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	// +kubebuilder:validation:items:Enum=virtio-block;virtio-vsock;virtio-rng;diagnostic-serial;virtio-net
	DeviceClasses []string `json:"deviceClasses,omitempty"`
	// consoleMode says what the backend's console may be used for.
	// +optional
	ConsoleMode ConsoleMode `json:"consoleMode,omitempty"`
	// networkProfiles are the network profiles the backend can enforce.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +listType=set
	// +kubebuilder:validation:items:Enum=none;isolated;egress-allowlisted
	NetworkProfiles []string `json:"networkProfiles"`
	// hostFilesystemSharing says how the backend shares host files with an environment.
	// +required
	HostFilesystemSharing HostFilesystemSharing `json:"hostFilesystemSharing"`
	// credentialInjection says how the backend can give an environment credentials.
	// +required
	CredentialInjection CredentialInjection `json:"credentialInjection"`
	// resourceEnforcement names the resource limits the backend enforces.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +kubebuilder:validation:items:Enum=host-cpu;host-memory;host-process;host-storage;host-io;guest-vcpu;guest-memory;guest-pids;guest-storage;channel-bounds
	ResourceEnforcement []string `json:"resourceEnforcement,omitempty"`
	// lifecycleOperations names the lifecycle operations the backend supports.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=6
	// +listType=set
	// +kubebuilder:validation:items:Enum=allocate;start;inspect;drain;teardown;recover
	LifecycleOperations []string `json:"lifecycleOperations"`
}

// BackendCapabilityStatus records the attestation.
type BackendCapabilityStatus struct {
	// attestedAt is when the node agent last attested the capability.
	// +optional
	AttestedAt *metav1.Time `json:"attestedAt,omitempty"`
	// nodeName is the node whose agent acts on the BackendCapability.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
	// conditions are the latest observations of the BackendCapability's state, one per condition
	// type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BackendCapability is a host-attested descriptor of one backend on one node. Only the
// node agent of that node may write it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wbcap,categories=workbench
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backendID`
// +kubebuilder:printcolumn:name="Isolation",type=string,JSONPath=`.spec.isolationClass`
// +kubebuilder:printcolumn:name="Attested",type=date,JSONPath=`.status.attestedAt`
type BackendCapability struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the BackendCapability.
	// +required
	Spec BackendCapabilitySpec `json:"spec"`
	// status is the observed state of the BackendCapability.
	// +optional
	Status BackendCapabilityStatus `json:"status,omitempty"`
}

// BackendCapabilityList is a list of BackendCapabilities.
// +kubebuilder:object:root=true
type BackendCapabilityList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackendCapability `json:"items"`
}

func init() { SchemeBuilder.Register(&BackendCapability{}, &BackendCapabilityList{}) }

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// +required
	BackendID BackendID `json:"backendID"`
	// +required
	// +kubebuilder:validation:MaxLength=63
	Provider string `json:"provider"`
	// +required
	// +kubebuilder:validation:MaxLength=63
	Version string `json:"version"`
	// binaryDigest of the agent or VMM binary that provides the backend.
	// +optional
	BinaryDigest Digest `json:"binaryDigest,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=63
	PlatformRef string `json:"platformRef,omitempty"`
	// +required
	// +kubebuilder:validation:Enum=local-only;remote-sandbox
	Locality string `json:"locality"`
	// +required
	// +kubebuilder:validation:Enum=x86_64;arm64
	HostArchitecture string `json:"hostArchitecture"`
	// +optional
	// +kubebuilder:validation:Enum=x86_64;arm64
	GuestArchitecture string `json:"guestArchitecture,omitempty"`
	// +required
	IsolationClass IsolationClass `json:"isolationClass"`
	// +required
	SystemFidelity SystemFidelity `json:"systemFidelity"`
	// +required
	// +kubebuilder:validation:Enum=none;local-process;virtio-vsock
	ControlTransport string `json:"controlTransport"`
	// +optional
	// +kubebuilder:validation:Enum=none;af-vsock
	ControlGuestEndpoint string `json:"controlGuestEndpoint,omitempty"`
	// +optional
	// +kubebuilder:validation:Enum=none;af-vsock;unix-domain-socket
	ControlHostEndpoint string `json:"controlHostEndpoint,omitempty"`
	// +optional
	// +kubebuilder:validation:Enum=none;environment-generation-boot-nonce
	ControlChannelBinding string `json:"controlChannelBinding,omitempty"`
	// +optional
	// +kubebuilder:validation:Enum=none;efi;direct-kernel
	BootMode string `json:"bootMode,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	// +kubebuilder:validation:items:Enum=directory-copy;raw;kernel-initrd-rootfs
	StorageFormats []string `json:"storageFormats,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	// +kubebuilder:validation:items:Enum=virtio-block;virtio-vsock;virtio-rng;diagnostic-serial;virtio-net
	DeviceClasses []string `json:"deviceClasses,omitempty"`
	// +optional
	// +kubebuilder:validation:Enum=none;diagnostic-output-only
	ConsoleMode string `json:"consoleMode,omitempty"`
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +listType=set
	// +kubebuilder:validation:items:Enum=none;isolated;egress-allowlisted
	NetworkProfiles []string `json:"networkProfiles"`
	// +required
	HostFilesystemSharing HostFilesystemSharing `json:"hostFilesystemSharing"`
	// +required
	CredentialInjection CredentialInjection `json:"credentialInjection"`
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +kubebuilder:validation:items:Enum=host-cpu;host-memory;host-process;host-storage;host-io;guest-vcpu;guest-memory;guest-pids;guest-storage;channel-bounds
	ResourceEnforcement []string `json:"resourceEnforcement,omitempty"`
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=6
	// +listType=set
	// +kubebuilder:validation:items:Enum=allocate;start;inspect;drain;teardown;recover
	LifecycleOperations []string `json:"lifecycleOperations"`
}

// BackendCapabilityStatus records the attestation.
type BackendCapabilityStatus struct {
	// +optional
	AttestedAt *metav1.Time `json:"attestedAt,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
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
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec BackendCapabilitySpec `json:"spec"`
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

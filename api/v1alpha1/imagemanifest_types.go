package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageDigests are the digests shared by every variant of a logical image; variants share
// one logical ref only when these are identical.
type ImageDigests struct {
	// userspace is the digest of the guest userspace.
	// +required
	Userspace Digest `json:"userspace"`
	// sbom is the digest of the image's software bill of materials.
	// +optional
	SBOM Digest `json:"sbom,omitempty"`
	// provenance is the digest of the image's build provenance.
	// +optional
	Provenance Digest `json:"provenance,omitempty"`
	// provenanceRef names the build the provenance records (builder@revision). A
	// manifest with a full-system variant (one with a disk) must carry it, the sbom and the
	// provenance digest: the seed's equivalence fields.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._/@:+-]*$`
	ProvenanceRef string `json:"provenanceRef,omitempty"`
	// agent is the digest of the guest agent binary.
	// +required
	Agent Digest `json:"agent"`
	// protocol is the digest of the guest agent protocol definition.
	// +required
	Protocol Digest `json:"protocol"`
}

// BootMode is how an image variant boots.
// +kubebuilder:validation:Enum=efi;direct-kernel
type BootMode string

const (
	// BootModeEFI: the variant boots through EFI firmware.
	BootModeEFI BootMode = "efi"
	// BootModeDirectKernel: the variant's kernel is booted directly.
	BootModeDirectKernel BootMode = "direct-kernel"
)

// ImageVariant is one backend-specific boot variant.
type ImageVariant struct {
	// name is the variant's name, unique in the manifest.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name"`
	// backendID is the backend the variant boots on.
	// +required
	BackendID BackendID `json:"backendID"`
	// architecture is the variant's CPU architecture.
	// +required
	Architecture Architecture `json:"architecture"`
	// bootMode is how the variant boots.
	// +required
	BootMode BootMode `json:"bootMode"`
	// kernel is the kernel file, for direct-kernel boot.
	// +optional
	Kernel *ImageFile `json:"kernel,omitempty"`
	// initrd is the initial ramdisk file, for direct-kernel boot.
	// +optional
	Initrd *ImageFile `json:"initrd,omitempty"`
	// firmware is the firmware file, for EFI boot.
	// +optional
	Firmware *ImageFile `json:"firmware,omitempty"`
	// disk is the root disk image file.
	// +optional
	Disk *ImageFile `json:"disk,omitempty"`
	// kernelCommandLine for direct-kernel boots.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	KernelCommandLine string `json:"kernelCommandLine,omitempty"`
}

// ImageFile is one boot artifact: its digest and where nodes find it.
type ImageFile struct {
	// digest is the file's content digest.
	// +required
	Digest Digest `json:"digest"`
	// path on nodes, beneath the node agent's image directory.
	// +required
	Path RelativePath `json:"path"`
	// size is the file's size in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
}

// ImageManifestSpec is a logical guest image and its variants.
type ImageManifestSpec struct {
	// digests are the digests every variant shares.
	// +required
	Digests ImageDigests `json:"digests"`
	// variants are the image's builds per backend and architecture.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Variants []ImageVariant `json:"variants"`
}

// ImageVerification records one node's verification of a variant.
type ImageVerification struct {
	// nodeName is the node whose agent acts on the ImageVerification.
	// +required
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`
	// variant names the verified variant.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Variant string `json:"variant"`
	// verifiedAt is when the node verified the variant.
	// +required
	VerifiedAt metav1.Time `json:"verifiedAt"`
	// generation is the metadata.generation of the manifest the node verified; a
	// verification of an earlier generation says nothing about the current spec.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// code is set when the node could not verify the variant (digest-mismatch,
	// image-invalid); such an entry is a failed verification.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code,omitempty"`
	// message says why verification failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// ImageManifestStatus lists where the image was verified.
type ImageManifestStatus struct {
	// verifiedOn lists the nodes that verified (or failed to verify) a variant of the image,
	// one entry per node and variant, each written by that node's agent.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=nodeName
	// +listMapKey=variant
	VerifiedOn []ImageVerification `json:"verifiedOn,omitempty"`
	// observedGeneration is the metadata.generation the manager computed conditions for:
	// Ready once a node verified a variant of this generation, Reconciling until then,
	// Stalled when every node that tried failed.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the ImageManifest's state, one per condition type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ImageManifest is a logical guest image and its variants.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wbimg,categories=workbench
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.spec.digests.agent`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ImageManifest struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the ImageManifest.
	// +required
	Spec ImageManifestSpec `json:"spec"`
	// status is the observed state of the ImageManifest.
	// +optional
	Status ImageManifestStatus `json:"status,omitempty"`
}

// ImageManifestList is a list of ImageManifests.
// +kubebuilder:object:root=true
type ImageManifestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImageManifest `json:"items"`
}

func init() { SchemeBuilder.Register(&ImageManifest{}, &ImageManifestList{}) }

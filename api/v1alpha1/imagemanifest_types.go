package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageDigests are the digests shared by every variant of a logical image; variants share
// one logical ref only when these are identical.
type ImageDigests struct {
	// +required
	Userspace Digest `json:"userspace"`
	// +optional
	SBOM Digest `json:"sbom,omitempty"`
	// +optional
	Provenance Digest `json:"provenance,omitempty"`
	// +required
	Agent Digest `json:"agent"`
	// +required
	Protocol Digest `json:"protocol"`
}

// ImageVariant is one backend-specific boot variant.
type ImageVariant struct {
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name"`
	// +required
	BackendID BackendID `json:"backendID"`
	// +required
	// +kubebuilder:validation:Enum=x86_64;arm64
	Architecture string `json:"architecture"`
	// +required
	// +kubebuilder:validation:Enum=efi;direct-kernel
	BootMode string `json:"bootMode"`
	// +optional
	Kernel *ImageFile `json:"kernel,omitempty"`
	// +optional
	Initrd *ImageFile `json:"initrd,omitempty"`
	// +optional
	Firmware *ImageFile `json:"firmware,omitempty"`
	// +optional
	Disk *ImageFile `json:"disk,omitempty"`
	// kernelCommandLine for direct-kernel boots.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	KernelCommandLine string `json:"kernelCommandLine,omitempty"`
}

// ImageFile is one boot artifact: its digest and where nodes find it.
type ImageFile struct {
	// +required
	Digest Digest `json:"digest"`
	// path on nodes, beneath the node agent's image directory.
	// +required
	Path RelativePath `json:"path"`
	// +optional
	Size int64 `json:"size,omitempty"`
}

// ImageManifestSpec is a logical guest image and its variants.
type ImageManifestSpec struct {
	// +required
	Digests ImageDigests `json:"digests"`
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Variants []ImageVariant `json:"variants"`
}

// ImageVerification records one node's verification of a variant.
type ImageVerification struct {
	// +required
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`
	// +required
	// +kubebuilder:validation:MaxLength=63
	Variant string `json:"variant"`
	// +required
	VerifiedAt metav1.Time `json:"verifiedAt"`
}

// ImageManifestStatus lists where the image was verified.
type ImageManifestStatus struct {
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	VerifiedOn []ImageVerification `json:"verifiedOn,omitempty"`
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
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec ImageManifestSpec `json:"spec"`
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

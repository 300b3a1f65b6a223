package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BundleSignerSpec pins one Ed25519 public key trusted to sign SkillBundles (seed 004's
// v0.2 signed bundles), the sibling of ActionSigner for catalogs. A signed bundle imports
// only when its signature over content_hash verifies with a BundleSigner pinned for the
// importing namespace; the key inside a bundle is never trusted (it carries only the key
// id, sha256 of the raw key).
type BundleSignerSpec struct {
	// publicKey is the standard base64 of the 32-byte Ed25519 public key.
	// +required
	// +kubebuilder:validation:MinLength=44
	// +kubebuilder:validation:MaxLength=44
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{43}=$`
	PublicKey string `json:"publicKey"`
	// namespaces where bundles signed by this key may be imported: exact names, or the
	// single explicit entry "*" for all namespaces. Never empty.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=63
	Namespaces []string `json:"namespaces"`
	// description names the holder (audit aid).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
}

// BundleSignerStatus is written by the manager: the key's fingerprint once it parsed, and
// the kstatus conditions (docs/gitops.md).
type BundleSignerStatus struct {
	// keyID is sha256:<hex> of the raw public key (the id a signed bundle names).
	// +optional
	KeyID Digest `json:"keyID,omitempty"`
	// observedGeneration is the metadata.generation of the BundleSigner that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the BundleSigner's state, one per condition
	// type (Valid, Reconciling, Stalled).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BundleSigner is a cluster-scoped trusted SkillBundle signer.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wbbundlesigner,categories=workbench
// +kubebuilder:printcolumn:name="Namespaces",type=string,JSONPath=`.spec.namespaces`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BundleSigner struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec pins the key.
	// +required
	Spec BundleSignerSpec `json:"spec"`
	// status is the observed state of the BundleSigner.
	// +optional
	Status BundleSignerStatus `json:"status,omitempty"`
}

// BundleSignerList is a list of BundleSigners.
// +kubebuilder:object:root=true
type BundleSignerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BundleSigner `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BundleSigner{}, &BundleSignerList{})
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PatchFormat is the format of a patch.
// +kubebuilder:validation:Enum=unified;structured
type PatchFormat string

const (
	PatchFormatUnified    PatchFormat = "unified"
	PatchFormatStructured PatchFormat = "structured"
)

// FileOperationKind is one structured edit.
// +kubebuilder:validation:Enum=create;replace;append;delete
type FileOperationKind string

// FileOperation is one structured edit of one file.
type FileOperation struct {
	// +required
	Op FileOperationKind `json:"op"`
	// +required
	Path RelativePath `json:"path"`
	// content for create, replace and append.
	// +optional
	// +kubebuilder:validation:MaxLength=262144
	Content *string `json:"content,omitempty"`
}

// PatchPolicy bounds what a patch may do.
type PatchPolicy struct {
	// +optional
	// +kubebuilder:default=true
	RequireCleanApply *bool `json:"requireCleanApply,omitempty"`
	// +optional
	// +kubebuilder:default=false
	AllowCreate *bool `json:"allowCreate,omitempty"`
	// allowDelete is false unless set: a delete is refused by default.
	// +optional
	// +kubebuilder:default=false
	AllowDelete *bool `json:"allowDelete,omitempty"`
	// +optional
	// +kubebuilder:default=16
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	MaxChangedFiles *int32 `json:"maxChangedFiles,omitempty"`
}

// PatchApprovalState is an operator's decision on a patch.
// +kubebuilder:validation:Enum=Pending;Approved;Rejected
type PatchApprovalState string

// FilePatchSpec is a proposed change to a workspace root.
// +kubebuilder:validation:XValidation:rule="self.environmentRef == oldSelf.environmentRef && self.root == oldSelf.root && self.format == oldSelf.format && self.digest == oldSelf.digest && self.policy == oldSelf.policy && has(self.patch) == has(oldSelf.patch) && (!has(self.patch) || self.patch == oldSelf.patch) && has(self.operations) == has(oldSelf.operations) && (!has(self.operations) || self.operations == oldSelf.operations) && has(self.artifactRef) == has(oldSelf.artifactRef) && (!has(self.artifactRef) || self.artifactRef == oldSelf.artifactRef)",message="immutable: only approval may change"
// +kubebuilder:validation:XValidation:rule="self.format == 'unified' ? ([has(self.patch), has(self.artifactRef)].filter(x, x).size() == 1 && !has(self.operations)) : (has(self.operations) && !has(self.patch))",message="patch-invalid: a unified patch has exactly one of patch or artifactRef; a structured patch has operations"
type FilePatchSpec struct {
	// +required
	EnvironmentRef ObjectName `json:"environmentRef"`
	// +required
	Root RootName `json:"root"`
	// +required
	Format PatchFormat `json:"format"`
	// patch is an inline unified diff.
	// +optional
	// +kubebuilder:validation:MaxLength=262144
	Patch *string `json:"patch,omitempty"`
	// operations are structured edits.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Operations []FileOperation `json:"operations,omitempty"`
	// artifactRef names an Artifact holding the patch.
	// +optional
	ArtifactRef *ObjectName `json:"artifactRef,omitempty"`
	// digest of the patch content (inline patch bytes, or the canonical JSON of operations).
	// +required
	Digest Digest `json:"digest"`
	// +optional
	Policy PatchPolicy `json:"policy,omitempty"`
	// approval is set by an operator (approve on filepatches) unless the environment auto-applies.
	// +optional
	// +kubebuilder:default=Pending
	Approval PatchApprovalState `json:"approval,omitempty"`
}

// FilePatchPhase is a one-word summary.
// +kubebuilder:validation:Enum=AwaitingApproval;Applied;Rejected
type FilePatchPhase string

// ChangedFile is one file a patch changed.
type ChangedFile struct {
	// +required
	Path RelativePath `json:"path"`
	// +required
	Op FileOperationKind `json:"op"`
	// +optional
	DigestBefore Digest `json:"digestBefore,omitempty"`
	// +optional
	DigestAfter Digest `json:"digestAfter,omitempty"`
}

// FilePatchStatus is the patch's outcome.
type FilePatchStatus struct {
	// +optional
	Phase FilePatchPhase `json:"phase,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	ChangedFiles []ChangedFile `json:"changedFiles,omitempty"`
	// +optional
	Refusal *Refusal `json:"refusal,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ApprovedBy string `json:"approvedBy,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FilePatch is an approved change to a workspace.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbpatch,categories=workbench
// +kubebuilder:printcolumn:name="Environment",type=string,JSONPath=`.spec.environmentRef`
// +kubebuilder:printcolumn:name="Approval",type=string,JSONPath=`.spec.approval`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Refusal",type=string,JSONPath=`.status.refusal.code`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FilePatch struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec FilePatchSpec `json:"spec"`
	// +optional
	Status FilePatchStatus `json:"status,omitempty"`
}

// FilePatchList is a list of FilePatches.
// +kubebuilder:object:root=true
type FilePatchList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FilePatch `json:"items"`
}

func init() { SchemeBuilder.Register(&FilePatch{}, &FilePatchList{}) }

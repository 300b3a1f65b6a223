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
	// op is what the operation does to the file.
	// +required
	Op FileOperationKind `json:"op"`
	// path is the file's path relative to the patch root.
	// +required
	Path RelativePath `json:"path"`
	// content for create, replace and append.
	// +optional
	// +kubebuilder:validation:MaxLength=262144
	Content *string `json:"content,omitempty"`
}

// PatchPolicy bounds what a patch may do.
type PatchPolicy struct {
	// requireCleanApply refuses a patch that does not apply without fuzz or offset.
	// +optional
	// +kubebuilder:default=true
	RequireCleanApply *bool `json:"requireCleanApply,omitempty"`
	// allowCreate lets the patch create files.
	// +optional
	// +kubebuilder:default=false
	AllowCreate *bool `json:"allowCreate,omitempty"`
	// allowDelete is false unless set: a delete is refused by default.
	// +optional
	// +kubebuilder:default=false
	AllowDelete *bool `json:"allowDelete,omitempty"`
	// maxChangedFiles is the most files one patch may change.
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
	// environmentRef names the Environment, in the same namespace, the patch applies to.
	// +required
	EnvironmentRef ObjectName `json:"environmentRef"`
	// root names the environment root the patch's paths are relative to.
	// +required
	Root RootName `json:"root"`
	// format is the patch's format.
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
	// policy bounds what the patch may do.
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
	// path is the changed file's path relative to the patch root.
	// +required
	Path RelativePath `json:"path"`
	// op is what the patch did to the file.
	// +required
	Op FileOperationKind `json:"op"`
	// digestBefore is the file's content digest before the patch.
	// +optional
	DigestBefore Digest `json:"digestBefore,omitempty"`
	// digestAfter is the file's content digest after the patch.
	// +optional
	DigestAfter Digest `json:"digestAfter,omitempty"`
}

// FilePatchStatus is the patch's outcome.
type FilePatchStatus struct {
	// phase summarizes the FilePatch's conditions in one word, derived in one place; read the
	// conditions for detail.
	// +optional
	Phase FilePatchPhase `json:"phase,omitempty"`
	// changedFiles lists the files the patch changed.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	ChangedFiles []ChangedFile `json:"changedFiles,omitempty"`
	// refusal is the stable code and message that refused the FilePatch, when it was refused
	// (codes: docs/vocabulary.md).
	// +optional
	Refusal *Refusal `json:"refusal,omitempty"`
	// observedGeneration is the metadata.generation of the FilePatch that this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the FilePatch's state, one per condition type.
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
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the FilePatch.
	// +required
	Spec FilePatchSpec `json:"spec"`
	// status is the observed state of the FilePatch.
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

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ArtifactSource says how an artifact came to be.
// +kubebuilder:validation:Enum=capture;export;upload;recording;action
type ArtifactSource string

// Classification labels the sensitivity of an artifact.
// +kubebuilder:validation:Enum=public;internal;confidential;restricted
type Classification string

// ExportFormat is the encoding of an export Artifact.
// +kubebuilder:validation:Enum=tar;tar+gzip;git-patch
type ExportFormat string

// Export formats.
const (
	// ExportFormatTar is a deterministic tar of the root's subtree (the default).
	ExportFormatTar ExportFormat = "tar"
	// ExportFormatTarGzip is the same tar, gzip-compressed (no name or time in the header).
	ExportFormatTarGzip ExportFormat = "tar+gzip"
	// ExportFormatGitPatch is a git-format patch (git format-patch) of the root's changes
	// against its source commit, computed by the node agent (docs/workspace-sources.md).
	ExportFormatGitPatch ExportFormat = "git-patch"
)

// ArtifactSpec describes a content-addressed blob held by a node.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="immutable: spec is immutable"
// +kubebuilder:validation:XValidation:rule="!has(self.format) || self.source == 'export'",message="export-invalid: format is set only on an export"
// +kubebuilder:validation:XValidation:rule="!has(self.filePatchRef) || (has(self.format) && self.format == 'git-patch')",message="export-invalid: filePatchRef is set only on a git-patch export"
type ArtifactSpec struct {
	// environmentRef names the Environment, in the same namespace, the artifact is taken from.
	// +required
	EnvironmentRef ObjectName `json:"environmentRef"`
	// source says what the artifact is taken from.
	// +required
	Source ArtifactSource `json:"source"`
	// sessionRef names the captured session (capture).
	// +optional
	SessionRef *ObjectName `json:"sessionRef,omitempty"`
	// root and path name the exported subtree (export).
	// +optional
	Root *RootName `json:"root,omitempty"`
	// path is the path of the file to collect, relative to the environment's root.
	// +optional
	Path *RelativePath `json:"path,omitempty"`
	// format of an export: tar (default), tar+gzip, or git-patch (the root's changes against
	// its source commit: status.roots[].resolved for a git root, the HEAD of the root's own
	// repository otherwise).
	// +optional
	Format *ExportFormat `json:"format,omitempty"`
	// filePatchRef restricts a git-patch export to the files a FilePatch, in the same
	// namespace and environment, changed (its status.changedFiles).
	// +optional
	FilePatchRef *ObjectName `json:"filePatchRef,omitempty"`
	// classification is the artifact's data classification; it bounds who may read the artifact.
	// +optional
	// +kubebuilder:default=internal
	Classification Classification `json:"classification,omitempty"`
	// retentionSeconds after which the node may delete the blob.
	// +optional
	// +kubebuilder:default=86400
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=2592000
	RetentionSeconds int64 `json:"retentionSeconds,omitempty"`
}

// ArtifactStatus locates the blob.
type ArtifactStatus struct {
	// digest is the collected artifact's content digest.
	// +optional
	Digest Digest `json:"digest,omitempty"`
	// size is the collected artifact's size in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// base is the commit a git-patch export was taken against.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Base string `json:"base,omitempty"`
	// files is the number of files a git-patch export changes.
	// +optional
	Files int32 `json:"files,omitempty"`
	// nodeName is the node whose agent acts on the Artifact.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
	// retainedUntil is when the node may delete the artifact's content.
	// +optional
	RetainedUntil *metav1.Time `json:"retainedUntil,omitempty"`
	// refusal is the stable code and message that refused the Artifact, when it was refused
	// (codes: docs/vocabulary.md).
	// +optional
	Refusal *Refusal `json:"refusal,omitempty"`
	// observedGeneration is the metadata.generation of the Artifact that this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the Artifact's state, one per condition type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Artifact is a content-addressed blob held by a node.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbart,categories=workbench
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.status.digest`,priority=1
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Correlation",type=string,JSONPath=`.metadata.labels.workbench\.sensorium\.dev/correlation-id`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Artifact struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the Artifact.
	// +required
	Spec ArtifactSpec `json:"spec"`
	// status is the observed state of the Artifact.
	// +optional
	Status ArtifactStatus `json:"status,omitempty"`
}

// ArtifactList is a list of Artifacts.
// +kubebuilder:object:root=true
type ArtifactList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Artifact `json:"items"`
}

func init() { SchemeBuilder.Register(&Artifact{}, &ArtifactList{}) }

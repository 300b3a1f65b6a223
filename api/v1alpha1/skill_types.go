package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SkillStepKind is the kind of a skill step (the kind of the recorded edge).
// +kubebuilder:validation:Enum=command;patch;wait;probe
type SkillStepKind string

// SkillParameter is a named input: occurrences of the demonstrated value in argv atoms,
// working directories, patch text and contents were replaced by "{{name}}".
type SkillParameter struct {
	// +required
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]{0,62}$`
	Name string `json:"name"`
	// default is the demonstrated value.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Default string `json:"default"`
	// +optional
	Occurrences int32 `json:"occurrences,omitempty"`
}

// SkillCwd is a working directory inside an environment root.
type SkillCwd struct {
	// +required
	Root RootName `json:"root"`
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path,omitempty"`
}

// SkillCommandStep is a command to run through a CommandProfile.
type SkillCommandStep struct {
	// +required
	Profile ObjectName `json:"profile"`
	// argv may hold "{{name}}" parameter references.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=4096
	Argv []string `json:"argv,omitempty"`
	// +required
	Cwd SkillCwd `json:"cwd"`
}

// SkillPatchOperation is one structured edit; path and content may hold parameter references.
type SkillPatchOperation struct {
	// +required
	Op FileOperationKind `json:"op"`
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path"`
	// +optional
	// +kubebuilder:validation:MaxLength=262144
	Content *string `json:"content,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=71
	ContentDigest string `json:"contentDigest,omitempty"`
	// +optional
	ContentBytes int64 `json:"contentBytes,omitempty"`
}

// SkillPatchStep is a patch to propose through a FilePatch.
type SkillPatchStep struct {
	// +required
	Root RootName `json:"root"`
	// +required
	Format PatchFormat `json:"format"`
	// +optional
	// +kubebuilder:validation:MaxLength=262144
	Patch *string `json:"patch,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Operations []SkillPatchOperation `json:"operations,omitempty"`
}

// SkillCondition is a recorded wait or probe, replayed as a state check.
type SkillCondition struct {
	// +required
	// +kubebuilder:validation:MaxLength=63
	Condition string `json:"condition"`
	// +required
	// +kubebuilder:validation:MaxLength=32
	Result string `json:"result"`
}

// SkillOutcome is a step's expected outcome.
type SkillOutcome struct {
	// +required
	// +kubebuilder:validation:MaxLength=32
	Phase string `json:"phase"`
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code,omitempty"`
}

// SkillStep is one ordered step with the state it expects.
type SkillStep struct {
	// index is the 1-based edge number on replay.
	// +required
	// +kubebuilder:validation:Minimum=1
	Index int32 `json:"index"`
	// +required
	Kind SkillStepKind `json:"kind"`
	// +optional
	Command *SkillCommandStep `json:"command,omitempty"`
	// +optional
	Patch *SkillPatchStep `json:"patch,omitempty"`
	// +optional
	Condition *SkillCondition `json:"condition,omitempty"`
	// +required
	ExpectedBefore Digest `json:"expectedBefore"`
	// +required
	ExpectedAfter Digest `json:"expectedAfter"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	ExpectedChanges []RecordedPathChange `json:"expectedChanges,omitempty"`
	// +required
	ExpectedOutcome SkillOutcome `json:"expectedOutcome"`
	// parameters the step references.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	Parameters []string `json:"parameters,omitempty"`
}

// SkillStateEntry is one entry of the initial workspace listing.
type SkillStateEntry struct {
	// +required
	// +kubebuilder:validation:MaxLength=4160
	Path string `json:"path"`
	RecordedPathState `json:",inline"`
}

// SkillState is the workspace state the skill starts from.
type SkillState struct {
	// +required
	Digest Digest `json:"digest"`
	// entries list the state (absent when it was not kept).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4097
	Entries []SkillStateEntry `json:"entries,omitempty"`
}

// SkillCapabilities are what the skill declares it uses; a replay step needing anything
// else is refused (capability-undeclared) and fails gate.no_hidden_capability.
type SkillCapabilities struct {
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Profiles []string `json:"profiles,omitempty"`
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	ActionIDs []string `json:"actionIds,omitempty"`
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=63
	Backends []string `json:"backends,omitempty"`
}

// SkillSpec is the skill manifest (seed 004 SkillManifest), crystallized from a Recording by
// `kubectl workbench skill crystallize`.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="immutable: spec is immutable; crystallize a new version"
type SkillSpec struct {
	// +required
	// +kubebuilder:validation:MaxLength=128
	Schema string `json:"schema"`
	// skillId is a UUIDv7.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`
	SkillID string `json:"skillId"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +required
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Slug string `json:"slug"`
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Description string `json:"description,omitempty"`
	// +required
	// +kubebuilder:validation:Minimum=1
	Version int32 `json:"version"`
	// +required
	// +kubebuilder:validation:MaxLength=36
	DerivedFromTraceID string `json:"derivedFromTraceId"`
	// backend of the demonstration.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Backend string `json:"backend"`
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Parameters []SkillParameter `json:"parameters,omitempty"`
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	Steps []SkillStep `json:"steps"`
	// +required
	InitialState SkillState `json:"initialState"`
	// +required
	Capabilities SkillCapabilities `json:"capabilities"`
	// +required
	// +kubebuilder:validation:Enum=halt_on_state_hash_mismatch
	FallbackBehavior string `json:"fallbackBehavior"`
	// +required
	CreatedAt metav1.Time `json:"createdAt"`
	// recordingRef names the Recording the skill came from (for export).
	// +optional
	RecordingRef *ObjectName `json:"recordingRef,omitempty"`
	// traceArtifactRef names the Artifact holding the demonstration's trace (for export).
	// +optional
	TraceArtifactRef *ObjectName `json:"traceArtifactRef,omitempty"`
	// traceDigest is that trace's digest.
	// +optional
	TraceDigest Digest `json:"traceDigest,omitempty"`
}

// SkillStatus reports validation.
type SkillStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Skill is a crystallized, parameterized recording with declared capabilities (seed 004).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbskill,categories=workbench
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Version",type=integer,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backend`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Skill struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec SkillSpec `json:"spec"`
	// +optional
	Status SkillStatus `json:"status,omitempty"`
}

// SkillList is a list of Skills.
// +kubebuilder:object:root=true
type SkillList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Skill `json:"items"`
}

func init() { SchemeBuilder.Register(&Skill{}, &SkillList{}) }

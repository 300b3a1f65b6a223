package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SkillStepKind is the kind of a skill step (the kind of the recorded edge).
// +kubebuilder:validation:Enum=command;patch;wait;probe
type SkillStepKind string

const (
	// SkillStepCommand is a TerminalCommand step.
	SkillStepCommand SkillStepKind = "command"
	// SkillStepPatch is a FilePatch step.
	SkillStepPatch SkillStepKind = "patch"
	// SkillStepWait is a Wait step.
	SkillStepWait SkillStepKind = "wait"
	// SkillStepProbe is a Probe step.
	SkillStepProbe SkillStepKind = "probe"
)

// FallbackBehavior is what a replay does when the workspace state differs from the
// recorded one.
// +kubebuilder:validation:Enum=halt_on_state_hash_mismatch
type FallbackBehavior string

// FallbackHaltOnStateHashMismatch halts the replay at the first state hash mismatch.
const FallbackHaltOnStateHashMismatch FallbackBehavior = "halt_on_state_hash_mismatch"

// SkillParameter is a named input: occurrences of the demonstrated value in argv atoms,
// working directories, patch text and contents were replaced by "{{name}}".
type SkillParameter struct {
	// name is the parameter's name, as it appears in the skill's steps.
	// +required
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]{0,62}$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// default is the demonstrated value.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Default string `json:"default"`
	// occurrences is how many times the parameter appears in the steps.
	// +optional
	Occurrences int32 `json:"occurrences,omitempty"`
}

// SkillCwd is a working directory inside an environment root.
type SkillCwd struct {
	// root names the environment root the step runs in.
	// +required
	Root RootName `json:"root"`
	// path is the working directory relative to the root.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path,omitempty"`
}

// SkillCommandStep is a command to run through a CommandProfile.
type SkillCommandStep struct {
	// profile names the CommandProfile the step runs under.
	// +required
	Profile ObjectName `json:"profile"`
	// argv may hold "{{name}}" parameter references.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=4096
	Argv []string `json:"argv,omitempty"`
	// cwd is where the step runs.
	// +required
	Cwd SkillCwd `json:"cwd"`
}

// SkillPatchOperation is one structured edit; path and content may hold parameter references.
type SkillPatchOperation struct {
	// op is what the operation does to the file.
	// +required
	Op FileOperationKind `json:"op"`
	// path is the file's path relative to the step's root.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path"`
	// content is the file's new content, when it is stored inline.
	// +optional
	// +kubebuilder:validation:MaxLength=262144
	Content *string `json:"content,omitempty"`
	// contentDigest is the digest of the file's new content.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	ContentDigest string `json:"contentDigest,omitempty"`
	// contentBytes is the size of the file's new content in bytes.
	// +optional
	ContentBytes int64 `json:"contentBytes,omitempty"`
}

// SkillPatchStep is a patch to propose through a FilePatch.
type SkillPatchStep struct {
	// root names the environment root the patch's paths are relative to.
	// +required
	Root RootName `json:"root"`
	// format is the patch's format.
	// +required
	Format PatchFormat `json:"format"`
	// patch is the patch text, for the unified-diff format.
	// +optional
	// +kubebuilder:validation:MaxLength=262144
	Patch *string `json:"patch,omitempty"`
	// operations are the file operations, for the operations format.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Operations []SkillPatchOperation `json:"operations,omitempty"`
}

// SkillCondition is a recorded wait or probe, replayed as a state check.
type SkillCondition struct {
	// condition names the recorded wait or probe condition.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Condition string `json:"condition"`
	// result is the result the condition had when recorded.
	// +required
	// +kubebuilder:validation:MaxLength=32
	Result string `json:"result"`
}

// SkillOutcome is a step's expected outcome.
type SkillOutcome struct {
	// phase is the final phase the step is expected to reach.
	// +required
	// +kubebuilder:validation:MaxLength=32
	Phase string `json:"phase"`
	// exitCode is the command's expected exit code.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// code is the expected refusal code, for a step expected to be refused.
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
	// kind is the kind of step; exactly one of command, patch or condition is set to match.
	// +required
	Kind SkillStepKind `json:"kind"`
	// command is the step's command, for a command step.
	// +optional
	Command *SkillCommandStep `json:"command,omitempty"`
	// patch is the step's file patch, for a patch step.
	// +optional
	Patch *SkillPatchStep `json:"patch,omitempty"`
	// condition is the step's state check, for a wait or probe step.
	// +optional
	Condition *SkillCondition `json:"condition,omitempty"`
	// expectedBefore is the workspace state digest the step expects before it runs.
	// +required
	ExpectedBefore Digest `json:"expectedBefore"`
	// expectedAfter is the workspace state digest the step expects after it runs.
	// +required
	ExpectedAfter Digest `json:"expectedAfter"`
	// expectedChanges are the path changes the step is expected to make.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	ExpectedChanges []RecordedPathChange `json:"expectedChanges,omitempty"`
	// expectedOutcome is the outcome the step is expected to have.
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
	// path is the entry's path relative to its root.
	// +required
	// +kubebuilder:validation:MaxLength=4160
	Path              string `json:"path"`
	RecordedPathState `json:",inline"`
}

// SkillState is the workspace state the skill starts from.
type SkillState struct {
	// digest is the digest of the whole initial workspace state.
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
	// profiles names the CommandProfiles the skill's steps use.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Profiles []string `json:"profiles,omitempty"`
	// actionIds names the catalog actions the skill's steps use.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	ActionIDs []string `json:"actionIds,omitempty"`
	// backends names the backends the skill was recorded and may replay on.
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
	// schema is the version of the skill format.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Schema string `json:"schema"`
	// skillId is a UUIDv7.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`
	// +kubebuilder:validation:MaxLength=36
	SkillID string `json:"skillId"`
	// name is the skill's human-readable name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// slug is the skill's short, URL-safe name.
	// +required
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Slug string `json:"slug"`
	// description says what the skill does.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Description string `json:"description,omitempty"`
	// version is the skill's version, from 1.
	// +required
	// +kubebuilder:validation:Minimum=1
	Version int32 `json:"version"`
	// derivedFromTraceId is the id of the recording trace the skill was derived from.
	// +required
	// +kubebuilder:validation:MaxLength=36
	DerivedFromTraceID string `json:"derivedFromTraceId"`
	// backend of the demonstration.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Backend string `json:"backend"`
	// parameters are the values a replay may substitute into the steps.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Parameters []SkillParameter `json:"parameters,omitempty"`
	// steps are the skill's steps, in order.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	Steps []SkillStep `json:"steps"`
	// initialState is the workspace state the skill starts from.
	// +required
	InitialState SkillState `json:"initialState"`
	// capabilities are what the skill's steps need to be allowed.
	// +required
	Capabilities SkillCapabilities `json:"capabilities"`
	// fallbackBehavior is what a replay does when the workspace state differs from the recorded
	// one.
	// +required
	FallbackBehavior FallbackBehavior `json:"fallbackBehavior"`
	// createdAt is when the skill was derived.
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
	// observedGeneration is the metadata.generation of the Skill that this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the Skill's state, one per condition type.
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
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the Skill.
	// +required
	Spec SkillSpec `json:"spec"`
	// status is the observed state of the Skill.
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

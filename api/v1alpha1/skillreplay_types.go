package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SkillReplayMode says what a state-hash mismatch does.
// +kubebuilder:validation:Enum=exact;structural
type SkillReplayMode string

const (
	// SkillReplayExact halts at the first state-hash mismatch.
	SkillReplayExact SkillReplayMode = "exact"
	// SkillReplayStructural halts when an edge's own effect diverges; a whole-tree hash
	// mismatch with a matching effect is a surprise and replay goes on.
	SkillReplayStructural SkillReplayMode = "structural"
)

// SkillReplayResult is the replay's result (seed 004).
// +kubebuilder:validation:Enum=Running;Success;HaltedAtEdge;CompletedWithSurprises
type SkillReplayResult string

const (
	SkillReplayRunning                SkillReplayResult = "Running"
	SkillReplaySuccess                SkillReplayResult = "Success"
	SkillReplayHaltedAtEdge           SkillReplayResult = "HaltedAtEdge"
	SkillReplayCompletedWithSurprises SkillReplayResult = "CompletedWithSurprises"
)

// SkillParameterValue is one parameter of a replay.
type SkillParameterValue struct {
	// +required
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]{0,62}$`
	Name string `json:"name"`
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value"`
}

// SkillReplaySpec replays a skill into an environment. Every step goes through the same
// admission as any caller: the replay creates TerminalCommands and FilePatches that the
// webhooks, profiles, consent and patch approval admit or refuse as usual.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="immutable: spec is immutable"
type SkillReplaySpec struct {
	// +required
	SkillRef ObjectName `json:"skillRef"`
	// environmentRef is the target environment.
	// +required
	EnvironmentRef ObjectName `json:"environmentRef"`
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Parameters []SkillParameterValue `json:"parameters,omitempty"`
	// +optional
	// +kubebuilder:default=exact
	Mode SkillReplayMode `json:"mode,omitempty"`
	// stepTimeoutSeconds bounds each step (including its wait for consent or approval).
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	StepTimeoutSeconds int64 `json:"stepTimeoutSeconds,omitempty"`
}

// PathDifference is one path whose observed state differs from the expected one.
type PathDifference struct {
	// +required
	// +kubebuilder:validation:MaxLength=4160
	Path string `json:"path"`
	// +optional
	Expected *RecordedPathState `json:"expected,omitempty"`
	// +optional
	Observed *RecordedPathState `json:"observed,omitempty"`
}

// SurpriseSignal reports a divergence at an edge.
type SurpriseSignal struct {
	// +required
	Edge int32 `json:"edge"`
	// +required
	// +kubebuilder:validation:Enum=state-before-mismatch;state-after-mismatch;outcome-mismatch;effect-mismatch;refused
	Kind string `json:"kind"`
	// +optional
	ExpectedHash Digest `json:"expectedHash,omitempty"`
	// +optional
	ObservedHash Digest `json:"observedHash,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Differences []PathDifference `json:"differences,omitempty"`
	// +optional
	DifferencesTruncated bool `json:"differencesTruncated,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// +required
	Halted bool `json:"halted"`
}

// SkillReplayEdge is the record of one replayed step.
type SkillReplayEdge struct {
	// +required
	Seq int32 `json:"seq"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Object string `json:"object,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Backend string `json:"backend,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Profile string `json:"profile,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=71
	StateBefore string `json:"stateBefore,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=71
	StateAfter string `json:"stateAfter,omitempty"`
	// +required
	Outcome SkillOutcome `json:"outcome"`
	// +optional
	// +kubebuilder:validation:MaxLength=71
	OutputDigest string `json:"outputDigest,omitempty"`
	// +required
	Authorization SkillAuthorization `json:"authorization"`
	// +required
	// +kubebuilder:validation:Enum=exact;structural;diverged;refused
	Match string `json:"match"`
}

// SkillAuthorization is what admitted an edge.
type SkillAuthorization struct {
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Kind string `json:"kind"`
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Ref string `json:"ref"`
}

// SkillDenial is a step refused before or at admission.
type SkillDenial struct {
	// +required
	Edge int32 `json:"edge"`
	// +required
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code"`
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// ProofGate is one gate's verdict.
type ProofGate struct {
	// +required
	// +kubebuilder:validation:MaxLength=63
	ID string `json:"id"`
	// +required
	// +kubebuilder:validation:Enum=pass;fail;inconclusive;n/a
	Verdict string `json:"verdict"`
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Level string `json:"level,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// ProofSummary is the replay's ProofResult verdict and gates.
type ProofSummary struct {
	// overallVerdict is pass, partial, fail or inconclusive, never rounded up.
	// +required
	// +kubebuilder:validation:Enum=pass;partial;fail;inconclusive
	OverallVerdict string `json:"overallVerdict"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=6
	Gates []ProofGate `json:"gates,omitempty"`
}

// SemanticFidelity says whether semantic judging was available.
type SemanticFidelity struct {
	// +required
	Available bool `json:"available"`
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
}

// SkillReplayStatus is the replay report.
type SkillReplayStatus struct {
	// +optional
	// +kubebuilder:validation:MaxLength=36
	ReplayID string `json:"replayID,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Backend string `json:"backend,omitempty"`
	// sessionRef is the TerminalSession the replay created for its commands.
	// +optional
	SessionRef ObjectName `json:"sessionRef,omitempty"`
	// recordingRef is the Recording through which the node reports each edge's state hashes.
	// +optional
	RecordingRef ObjectName `json:"recordingRef,omitempty"`
	// currentObject is the step object in flight.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CurrentObject string `json:"currentObject,omitempty"`
	// +optional
	StepStartTime *metav1.Time `json:"stepStartTime,omitempty"`
	// initialStateDigest is the target's state before the first step.
	// +optional
	InitialStateDigest Digest `json:"initialStateDigest,omitempty"`
	// +optional
	EdgesAttempted int32 `json:"edgesAttempted"`
	// +optional
	EdgesCommitted int32 `json:"edgesCommitted"`
	// fidelity is one of exact, structural, semantic, failed, inconclusive.
	// +optional
	// +kubebuilder:validation:Enum=exact;structural;semantic;failed;inconclusive
	Fidelity string `json:"fidelity,omitempty"`
	// +optional
	Semantic *SemanticFidelity `json:"semantic,omitempty"`
	// +optional
	Result SkillReplayResult `json:"result,omitempty"`
	// +optional
	HaltedAtEdge int32 `json:"haltedAtEdge,omitempty"`
	// resultText is the seed's literal result: success, halted-at-edge-N or
	// completed-with-surprises.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ResultText string `json:"resultText,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Edges []SkillReplayEdge `json:"edges,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Surprises []SurpriseSignal `json:"surprises,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Denials []SkillDenial `json:"denials,omitempty"`
	// +optional
	Proof *ProofSummary `json:"proof,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SkillReplay replays a skill through normal admission, halting at the first divergence
// with a SurpriseSignal, and reports fidelity and the proof verdict (seed 004).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbreplay,categories=workbench
// +kubebuilder:printcolumn:name="Skill",type=string,JSONPath=`.spec.skillRef`
// +kubebuilder:printcolumn:name="Environment",type=string,JSONPath=`.spec.environmentRef`
// +kubebuilder:printcolumn:name="Result",type=string,JSONPath=`.status.resultText`
// +kubebuilder:printcolumn:name="Fidelity",type=string,JSONPath=`.status.fidelity`
// +kubebuilder:printcolumn:name="Verdict",type=string,JSONPath=`.status.proof.overallVerdict`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SkillReplay struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec SkillReplaySpec `json:"spec"`
	// +optional
	Status SkillReplayStatus `json:"status,omitempty"`
}

// SkillReplayList is a list of SkillReplays.
// +kubebuilder:object:root=true
type SkillReplayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SkillReplay `json:"items"`
}

func init() { SchemeBuilder.Register(&SkillReplay{}, &SkillReplayList{}) }

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
	// name is the name of the skill parameter to set.
	// +required
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]{0,62}$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// value is the parameter's value for this replay.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value"`
}

// SkillReplaySpec replays a skill into an environment. Every step goes through the same
// admission as any caller: the replay creates TerminalCommands and FilePatches that the
// webhooks, profiles, consent and patch approval admit or refuse as usual.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="immutable: spec is immutable"
type SkillReplaySpec struct {
	// skillRef names the Skill, in the same namespace, to replay.
	// +required
	SkillRef ObjectName `json:"skillRef"`
	// environmentRef is the target environment.
	// +required
	EnvironmentRef ObjectName `json:"environmentRef"`
	// parameters are the values substituted into the skill's steps.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Parameters []SkillParameterValue `json:"parameters,omitempty"`
	// mode says how strictly the replay must match the recording.
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
	// path is the path that differs.
	// +required
	// +kubebuilder:validation:MaxLength=4160
	Path string `json:"path"`
	// expected is the path's recorded state; absent when it should not exist.
	// +optional
	Expected *RecordedPathState `json:"expected,omitempty"`
	// observed is the path's state now; absent when it does not exist.
	// +optional
	Observed *RecordedPathState `json:"observed,omitempty"`
}

// SurpriseKind is the kind of divergence a replay saw at an edge.
// +kubebuilder:validation:Enum=state-before-mismatch;state-after-mismatch;outcome-mismatch;effect-mismatch;refused
type SurpriseKind string

const (
	// SurpriseKindStateBeforeMismatch: the state before the edge differs from the recording.
	SurpriseKindStateBeforeMismatch SurpriseKind = "state-before-mismatch"
	// SurpriseKindStateAfterMismatch: the state after the edge differs from the recording.
	SurpriseKindStateAfterMismatch SurpriseKind = "state-after-mismatch"
	// SurpriseKindOutcomeMismatch: the step's outcome differs from the recording.
	SurpriseKindOutcomeMismatch SurpriseKind = "outcome-mismatch"
	// SurpriseKindEffectMismatch: the step's effects differ from the recording.
	SurpriseKindEffectMismatch SurpriseKind = "effect-mismatch"
	// SurpriseKindRefused: the step was refused.
	SurpriseKindRefused SurpriseKind = "refused"
)

// StepMatch says how a replayed step's result compares with the recording.
// +kubebuilder:validation:Enum=exact;structural;diverged;refused
type StepMatch string

const (
	// StepMatchExact: the result matches the recording exactly.
	StepMatchExact StepMatch = "exact"
	// StepMatchStructural: the result matches the recording structurally.
	StepMatchStructural StepMatch = "structural"
	// StepMatchDiverged: the result diverged from the recording.
	StepMatchDiverged StepMatch = "diverged"
	// StepMatchRefused: the step was refused.
	StepMatchRefused StepMatch = "refused"
)

// GateVerdict is the verdict of one proof gate.
// +kubebuilder:validation:Enum=pass;fail;inconclusive;n/a
type GateVerdict string

const (
	// GateVerdictPass: the gate passed.
	GateVerdictPass GateVerdict = "pass"
	// GateVerdictFail: the gate failed.
	GateVerdictFail GateVerdict = "fail"
	// GateVerdictInconclusive: the gate could not decide.
	GateVerdictInconclusive GateVerdict = "inconclusive"
	// GateVerdictNotApplicable: the gate does not apply.
	GateVerdictNotApplicable GateVerdict = "n/a"
)

// ProofVerdict is the overall verdict of a replay's proof, never rounded up.
// +kubebuilder:validation:Enum=pass;partial;fail;inconclusive
type ProofVerdict string

const (
	// ProofVerdictPass: every gate passed.
	ProofVerdictPass ProofVerdict = "pass"
	// ProofVerdictPartial: some gates passed.
	ProofVerdictPartial ProofVerdict = "partial"
	// ProofVerdictFail: the proof failed.
	ProofVerdictFail ProofVerdict = "fail"
	// ProofVerdictInconclusive: the proof could not decide.
	ProofVerdictInconclusive ProofVerdict = "inconclusive"
)

// ReplayFidelity is how faithfully a replay reproduced the recording.
// +kubebuilder:validation:Enum=exact;structural;semantic;failed;inconclusive
type ReplayFidelity string

const (
	// ReplayFidelityExact: the replay reproduced the recording exactly.
	ReplayFidelityExact ReplayFidelity = "exact"
	// ReplayFidelityStructural: the replay reproduced the recording structurally.
	ReplayFidelityStructural ReplayFidelity = "structural"
	// ReplayFidelitySemantic: the replay reproduced the recording semantically.
	ReplayFidelitySemantic ReplayFidelity = "semantic"
	// ReplayFidelityFailed: the replay did not reproduce the recording.
	ReplayFidelityFailed ReplayFidelity = "failed"
	// ReplayFidelityInconclusive: the replay's fidelity could not be decided.
	ReplayFidelityInconclusive ReplayFidelity = "inconclusive"
)

// SurpriseSignal reports a divergence at an edge.
type SurpriseSignal struct {
	// edge is the sequence number of the edge that diverged.
	// +required
	Edge int32 `json:"edge"`
	// kind is the kind of divergence.
	// +required
	Kind SurpriseKind `json:"kind"`
	// expectedHash is the recorded state digest.
	// +optional
	ExpectedHash Digest `json:"expectedHash,omitempty"`
	// observedHash is the state digest the replay saw.
	// +optional
	ObservedHash Digest `json:"observedHash,omitempty"`
	// differences are the paths that differ.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Differences []PathDifference `json:"differences,omitempty"`
	// differencesTruncated says the differences list was cut at its cap.
	// +optional
	DifferencesTruncated bool `json:"differencesTruncated,omitempty"`
	// message explains the divergence.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// halted says the replay stopped at this divergence.
	// +required
	Halted bool `json:"halted"`
}

// SkillReplayEdge is the record of one replayed step.
type SkillReplayEdge struct {
	// seq is the replayed step's position, from 1.
	// +required
	Seq int32 `json:"seq"`
	// object names the object the replay created for the step.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Object string `json:"object,omitempty"`
	// backend is the backend the step ran on.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Backend string `json:"backend,omitempty"`
	// profile names the CommandProfile the step ran under.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Profile string `json:"profile,omitempty"`
	// stateBefore is the workspace state digest before the step.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	StateBefore string `json:"stateBefore,omitempty"`
	// stateAfter is the workspace state digest after the step.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	StateAfter string `json:"stateAfter,omitempty"`
	// outcome is the step's outcome.
	// +required
	Outcome SkillOutcome `json:"outcome"`
	// outputDigest is the digest of the step's output.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	OutputDigest string `json:"outputDigest,omitempty"`
	// authorization is what admitted the step.
	// +required
	Authorization SkillAuthorization `json:"authorization"`
	// match says how the step's result compares with the recording.
	// +required
	Match StepMatch `json:"match"`
}

// SkillAuthorization is what admitted an edge.
type SkillAuthorization struct {
	// kind is the kind of authorization (a profile or a consent grant).
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Kind string `json:"kind"`
	// ref names the authorizing object.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Ref string `json:"ref"`
}

// SkillDenial is a step refused before or at admission.
type SkillDenial struct {
	// edge is the sequence number of the refused step.
	// +required
	Edge int32 `json:"edge"`
	// code is the refusal code.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code"`
	// message explains the refusal.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// ProofGate is one gate's verdict.
type ProofGate struct {
	// id names the gate.
	// +required
	// +kubebuilder:validation:MaxLength=63
	ID string `json:"id"`
	// verdict is the gate's verdict.
	// +required
	Verdict GateVerdict `json:"verdict"`
	// level is the assurance level the gate reached.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Level string `json:"level,omitempty"`
	// reason explains the verdict.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// ProofSummary is the replay's ProofResult verdict and gates.
type ProofSummary struct {
	// overallVerdict is pass, partial, fail or inconclusive, never rounded up.
	// +required
	OverallVerdict ProofVerdict `json:"overallVerdict"`
	// gates are the verdicts of the proof gates.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=6
	Gates []ProofGate `json:"gates,omitempty"`
}

// SemanticFidelity says whether semantic judging was available.
type SemanticFidelity struct {
	// available says whether semantic judging ran.
	// +required
	Available bool `json:"available"`
	// reason says why semantic judging did not run, when it did not.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
}

// SkillReplayStatus is the replay report.
type SkillReplayStatus struct {
	// replayID identifies this replay run.
	// +optional
	// +kubebuilder:validation:MaxLength=36
	ReplayID string `json:"replayID,omitempty"`
	// backend is the backend the replay ran on.
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
	// stepStartTime is when the current step started.
	// +optional
	StepStartTime *metav1.Time `json:"stepStartTime,omitempty"`
	// initialStateDigest is the target's state before the first step.
	// +optional
	InitialStateDigest Digest `json:"initialStateDigest,omitempty"`
	// edgesAttempted is the number of steps the replay tried.
	// +optional
	EdgesAttempted int32 `json:"edgesAttempted"`
	// edgesCommitted is the number of steps that completed and matched.
	// +optional
	EdgesCommitted int32 `json:"edgesCommitted"`
	// fidelity is one of exact, structural, semantic, failed, inconclusive.
	// +optional
	Fidelity ReplayFidelity `json:"fidelity,omitempty"`
	// semantic says whether semantic judging was available.
	// +optional
	Semantic *SemanticFidelity `json:"semantic,omitempty"`
	// result is the replay's overall result.
	// +optional
	Result SkillReplayResult `json:"result,omitempty"`
	// haltedAtEdge is the step the replay stopped at, when it halted.
	// +optional
	HaltedAtEdge int32 `json:"haltedAtEdge,omitempty"`
	// resultText is the seed's literal result: success, halted_at_edge_N or
	// completed_with_surprises.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ResultText string `json:"resultText,omitempty"`
	// edges are the records of the replayed steps.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Edges []SkillReplayEdge `json:"edges,omitempty"`
	// surprises are the divergences the replay saw.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Surprises []SurpriseSignal `json:"surprises,omitempty"`
	// denials are the steps refused before or at admission.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Denials []SkillDenial `json:"denials,omitempty"`
	// proof summarizes the proof gates.
	// +optional
	Proof *ProofSummary `json:"proof,omitempty"`
	// startTime is when the replay started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when the replay finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// observedGeneration is the metadata.generation of the SkillReplay that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the SkillReplay's state, one per condition type.
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
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the SkillReplay.
	// +required
	Spec SkillReplaySpec `json:"spec"`
	// status is the observed state of the SkillReplay.
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

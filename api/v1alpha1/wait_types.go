package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionKind is the closed vocabulary of wait and probe conditions.
// +kubebuilder:validation:Enum=terminal.output.since;terminal.output.matches;terminal.quiescent;terminal.command.done;terminal.process.alive;terminal.no-progress;file.exists;file.digest.changed;artifact.present;environment.ready;operation.done
type ConditionKind string

const (
	ConditionKindOutputSince    ConditionKind = "terminal.output.since"
	ConditionKindOutputMatches  ConditionKind = "terminal.output.matches"
	ConditionKindQuiescent      ConditionKind = "terminal.quiescent"
	ConditionKindCommandDone    ConditionKind = "terminal.command.done"
	ConditionKindProcessAlive   ConditionKind = "terminal.process.alive"
	ConditionKindNoProgress     ConditionKind = "terminal.no-progress"
	ConditionKindFileExists     ConditionKind = "file.exists"
	ConditionKindDigestChanged  ConditionKind = "file.digest.changed"
	ConditionKindArtifact       ConditionKind = "artifact.present"
	ConditionKindEnvironmentRdy ConditionKind = "environment.ready"
	ConditionKindOperationDone  ConditionKind = "operation.done"
)

// WaitCondition is one bounded condition.
type WaitCondition struct {
	// kind of the condition.
	// +required
	Kind ConditionKind `json:"kind"`

	// pattern is an RE2 expression for terminal.output.matches, matched on the bounded
	// screen and recent output.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Pattern *string `json:"pattern,omitempty"`

	// sinceSeq is the event cursor for terminal.output.since and terminal.output.matches.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SinceSeq *int64 `json:"sinceSeq,omitempty"`

	// quietSeconds is the silence window for terminal.quiescent and terminal.no-progress.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	QuietSeconds *int32 `json:"quietSeconds,omitempty"`

	// digest is the previous digest for file.digest.changed.
	// +optional
	Digest *Digest `json:"digest,omitempty"`
}

// WaitConditionStatus is the lifecycle of a wait.
// +kubebuilder:validation:Enum=Pending;Satisfied;TimedOut;Cancelled;Failed;Expired
type WaitConditionStatus string

const (
	WaitPending   WaitConditionStatus = "Pending"
	WaitSatisfied WaitConditionStatus = "Satisfied"
	WaitTimedOut  WaitConditionStatus = "TimedOut"
	WaitCancelled WaitConditionStatus = "Cancelled"
	WaitFailed    WaitConditionStatus = "Failed"
	WaitExpired   WaitConditionStatus = "Expired"
)

// WaitDiagnostic is an observation, never a verdict: silence is not a hang.
// +kubebuilder:validation:Enum=quiescent;waiting-for-input;no-progress;maybe-hung;probe-failed
type WaitDiagnostic string

// WaitOnTimeout says what happens when a wait times out.
// +kubebuilder:validation:Enum=ReturnNotKill
type WaitOnTimeout string

// WaitOnTimeoutReturnNotKill returns at the timeout and never kills anything.
const WaitOnTimeoutReturnNotKill WaitOnTimeout = "ReturnNotKill"

// WaitSpec is a declarative bounded condition.
// +kubebuilder:validation:XValidation:rule="self.scope == oldSelf.scope && self.condition == oldSelf.condition && self.deadlineSeconds == oldSelf.deadlineSeconds",message="immutable: scope, condition and deadline may not change"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.desiredState) || (has(self.desiredState) && self.desiredState == oldSelf.desiredState)",message="immutable: a cancelled wait stays cancelled"
// +kubebuilder:validation:XValidation:rule="self.deadlineSeconds <= 3600",message="deadline-above-max: deadlineSeconds must be at most 3600"
type WaitSpec struct {
	// scope names exactly one observed source.
	// +required
	Scope *Scope `json:"scope,omitempty"`

	// condition to wait for.
	// +required
	Condition WaitCondition `json:"condition"`

	// deadlineSeconds bounds the wait; the policy maximum is 3600.
	// +required
	// +kubebuilder:validation:Minimum=1
	DeadlineSeconds int32 `json:"deadlineSeconds"`

	// onTimeout says what happens at the timeout: a wait returns and never kills anything.
	// +optional
	// +kubebuilder:default=ReturnNotKill
	OnTimeout WaitOnTimeout `json:"onTimeout,omitempty"`

	// desiredState Cancelled ends a pending wait as Cancelled (a wait not registered yet
	// never starts). It may change only from unset to Cancelled.
	// +optional
	DesiredState WaitDesiredState `json:"desiredState,omitempty"`
}

// WaitDesiredState is what the proposer wants of a wait after it was created.
// +kubebuilder:validation:Enum=Cancelled
type WaitDesiredState string

// WaitDesiredCancelled asks for the wait to end as Cancelled.
const WaitDesiredCancelled WaitDesiredState = "Cancelled"

// Observed is what a wait or probe saw, as sequence numbers and digests only.
type Observed struct {
	// seqFrom is the first output sequence number seen.
	// +optional
	SeqFrom int64 `json:"seqFrom,omitempty"`
	// seqTo is the last output sequence number seen.
	// +optional
	SeqTo int64 `json:"seqTo,omitempty"`
	// digest is the digest of what was seen.
	// +optional
	Digest Digest `json:"digest,omitempty"`
}

// WaitStatus is the wait's own record.
type WaitStatus struct {
	// conditionStatus is whether the waited-for condition held when the wait ended.
	// +optional
	ConditionStatus WaitConditionStatus `json:"conditionStatus,omitempty"`
	// observed is what the wait saw, as sequence numbers and digests only.
	// +optional
	Observed *Observed `json:"observed,omitempty"`
	// diagnostics are coded observations about the wait's evaluation.
	// +optional
	// +kubebuilder:validation:MaxItems=5
	// +listType=set
	Diagnostics []WaitDiagnostic `json:"diagnostics,omitempty"`
	// durationMilliseconds from start to the final outcome.
	// +optional
	DurationMilliseconds int64 `json:"durationMilliseconds,omitempty"`
	// refusal is the stable code and message that refused the Wait, when it was refused (codes:
	// docs/vocabulary.md).
	// +optional
	Refusal *Refusal `json:"refusal,omitempty"`
	// nodeName is the node whose agent acts on the Wait.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
	// startTime is when the node started the wait.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// observedGeneration is the metadata.generation of the Wait that this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the Wait's state, one per condition type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Wait is a declarative bounded condition with its own outcome record.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbwait,categories=workbench
// +kubebuilder:printcolumn:name="Condition",type=string,JSONPath=`.spec.condition.kind`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditionStatus`
// +kubebuilder:printcolumn:name="Deadline",type=integer,JSONPath=`.spec.deadlineSeconds`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Wait struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the Wait.
	// +required
	Spec WaitSpec `json:"spec"`
	// status is the observed state of the Wait.
	// +optional
	Status WaitStatus `json:"status,omitempty"`
}

// WaitList is a list of Waits.
// +kubebuilder:object:root=true
type WaitList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Wait `json:"items"`
}

func init() { SchemeBuilder.Register(&Wait{}, &WaitList{}) }

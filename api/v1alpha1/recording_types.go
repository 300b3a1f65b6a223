package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RecordingDesiredState starts and stops a recording.
// +kubebuilder:validation:Enum=Active;Stopped
type RecordingDesiredState string

const (
	RecordingActive  RecordingDesiredState = "Active"
	RecordingStopped RecordingDesiredState = "Stopped"
)

// RecordingPhase is a derived one-word summary of a Recording.
// +kubebuilder:validation:Enum=Pending;Recording;Stopped;Failed
type RecordingPhase string

const (
	RecordingPhasePending   RecordingPhase = "Pending"
	RecordingPhaseRecording RecordingPhase = "Recording"
	RecordingPhaseStopped   RecordingPhase = "Stopped"
	RecordingPhaseFailed    RecordingPhase = "Failed"
)

// RecordingSpec names what to record. While desiredState is Active the node agent of the
// environment records every admitted TerminalCommand, applied FilePatch, satisfied Wait and
// Probe on it as an edge of the interaction trace, with the workspace state hash before and
// after each edge.
// +kubebuilder:validation:XValidation:rule="self.environmentRef == oldSelf.environmentRef && has(self.sessionRef) == has(oldSelf.sessionRef) && (!has(self.sessionRef) || self.sessionRef == oldSelf.sessionRef)",message="immutable: only desiredState may change"
// +kubebuilder:validation:XValidation:rule="oldSelf.desiredState != 'Stopped' || self.desiredState == 'Stopped'",message="immutable: a stopped recording cannot be restarted"
type RecordingSpec struct {
	// environmentRef is the environment whose work is recorded.
	// +required
	EnvironmentRef ObjectName `json:"environmentRef"`
	// sessionRef limits the recorded commands and waits to one session of the
	// environment (file patches of the environment are recorded either way).
	// +optional
	SessionRef *ObjectName `json:"sessionRef,omitempty"`
	// desiredState is what the recording should do: Active records; Stopped ends the recording and stores the trace.
	// +optional
	// +kubebuilder:default=Active
	DesiredState RecordingDesiredState `json:"desiredState,omitempty"`
}

// RecordingEdgeCounts counts the recorded edges by kind.
type RecordingEdgeCounts struct {
	// commands is the number of recorded command edges.
	// +optional
	Commands int32 `json:"commands,omitempty"`
	// patches is the number of recorded file-patch edges.
	// +optional
	Patches int32 `json:"patches,omitempty"`
	// waits is the number of recorded wait edges.
	// +optional
	Waits int32 `json:"waits,omitempty"`
	// probes is the number of recorded probe edges.
	// +optional
	Probes int32 `json:"probes,omitempty"`
	// refused counts commands refused while recording (recorded as denials, not steps).
	// +optional
	Refused int32 `json:"refused,omitempty"`
}

// PathEntryType is the kind of a file system entry in a recorded workspace state.
// +kubebuilder:validation:Enum=file;dir;symlink;other
type PathEntryType string

const (
	// PathEntryFile is a regular file.
	PathEntryFile PathEntryType = "file"
	// PathEntryDir is a directory.
	PathEntryDir PathEntryType = "dir"
	// PathEntrySymlink is a symbolic link.
	PathEntrySymlink PathEntryType = "symlink"
	// PathEntryOther is any other kind of entry.
	PathEntryOther PathEntryType = "other"
)

// RecordedPathState is one path's entry in a workspace state.
type RecordedPathState struct {
	// type is the kind of file system entry.
	// +required
	Type PathEntryType `json:"type"`
	// mode is the permission bits.
	// +required
	Mode int64 `json:"mode"`
	// digest is the entry's content digest (files and symlinks).
	// +optional
	// +kubebuilder:validation:MaxLength=71
	Digest string `json:"digest,omitempty"`
}

// RecordedPathChange is one path's difference across an edge; an absent side means the
// path did not exist.
type RecordedPathChange struct {
	// path is "<root>/<relative path>".
	// +required
	// +kubebuilder:validation:MaxLength=4160
	Path string `json:"path"`
	// before is the path's state before the edge; absent when the edge created it.
	// +optional
	Before *RecordedPathState `json:"before,omitempty"`
	// after is the path's state after the edge; absent when the edge removed it.
	// +optional
	After *RecordedPathState `json:"after,omitempty"`
}

// RecordedEdge summarizes one recent edge: hashes, digests, outcome and authorization, never
// output or contents.
type RecordedEdge struct {
	// seq is the edge's position in the recording, from 1.
	// +required
	// +kubebuilder:validation:Minimum=1
	Seq int32 `json:"seq"`
	// kind is the kind of object the edge recorded.
	// +required
	Kind SkillStepKind `json:"kind"`
	// object is the name of the TerminalCommand, FilePatch, Wait or Probe.
	// +required
	Object ObjectName `json:"object"`
	// correlationID is the recorded object's correlation id (its
	// workbench.sensorium.dev/correlation-id label), when it carries one.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	CorrelationID string `json:"correlationID,omitempty"`
	// stateBefore is the digest of the workspace state before the edge.
	// +required
	StateBefore Digest `json:"stateBefore"`
	// stateAfter is the digest of the workspace state after the edge.
	// +required
	StateAfter Digest `json:"stateAfter"`
	// phase is the object's outcome phase.
	// +required
	// +kubebuilder:validation:MaxLength=32
	Phase string `json:"phase"`
	// exitCode is the recorded command's exit code.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// code is a refusal code, when refused.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code,omitempty"`
	// argvDigest is the digest of the recorded command's argv.
	// +optional
	ArgvDigest Digest `json:"argvDigest,omitempty"`
	// outputDigest is the digest of the recorded command's output.
	// +optional
	OutputDigest Digest `json:"outputDigest,omitempty"`
	// authorization is what admitted the edge: "profile:<name>", "grant:<ref>",
	// "approval:<operator>" or "observe:<name>".
	// +required
	// +kubebuilder:validation:MaxLength=512
	Authorization string `json:"authorization"`
	// changes are the paths the edge changed (at most 64; changesTruncated beyond).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Changes []RecordedPathChange `json:"changes,omitempty"`
	// changesTruncated says the changes list was cut at its cap.
	// +optional
	ChangesTruncated bool `json:"changesTruncated,omitempty"`
	// outOfBand are paths changed since the previous edge by something that was not
	// recorded (at most 64).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	OutOfBand []RecordedPathChange `json:"outOfBand,omitempty"`
}

// RecordingStatus holds counts, digests and references only.
type RecordingStatus struct {
	// phase summarizes the Recording's conditions in one word, derived in one place; read the
	// conditions for detail.
	// +optional
	Phase RecordingPhase `json:"phase,omitempty"`
	// traceID is the trace's UUIDv7.
	// +optional
	// +kubebuilder:validation:MaxLength=36
	TraceID string `json:"traceID,omitempty"`
	// nodeName is the node whose agent acts on the Recording.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
	// backend is the backend of the recorded environment.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Backend string `json:"backend,omitempty"`
	// edges is the number of edges recorded.
	// +optional
	Edges int32 `json:"edges,omitempty"`
	// counts are the recorded edges per kind.
	// +optional
	Counts RecordingEdgeCounts `json:"counts,omitempty"`
	// initialStateDigest is the workspace state when recording started.
	// +optional
	InitialStateDigest Digest `json:"initialStateDigest,omitempty"`
	// lastStateDigest is the state after the latest edge.
	// +optional
	LastStateDigest Digest `json:"lastStateDigest,omitempty"`
	// recentEdges are the latest edges (at most 16), oldest first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	RecentEdges []RecordedEdge `json:"recentEdges,omitempty"`
	// traceDigest is the digest of the stored trace (set when stopped).
	// +optional
	TraceDigest Digest `json:"traceDigest,omitempty"`
	// traceArtifactRef names the Artifact holding the trace (set when stopped).
	// +optional
	TraceArtifactRef ObjectName `json:"traceArtifactRef,omitempty"`
	// refusal is the stable code and message that refused the Recording, when it was refused
	// (codes: docs/vocabulary.md).
	// +optional
	Refusal *Refusal `json:"refusal,omitempty"`
	// startTime is when the recording started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// stopTime is when the recording stopped.
	// +optional
	StopTime *metav1.Time `json:"stopTime,omitempty"`
	// observedGeneration is the metadata.generation of the Recording that this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the Recording's state, one per condition type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Recording is the trace of admitted work in an environment with workspace state hashes per
// edge (seed 004).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbrec,categories=workbench
// +kubebuilder:printcolumn:name="Environment",type=string,JSONPath=`.spec.environmentRef`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Edges",type=integer,JSONPath=`.status.edges`
// +kubebuilder:printcolumn:name="Trace",type=string,JSONPath=`.status.traceArtifactRef`,priority=1
// +kubebuilder:printcolumn:name="Correlation",type=string,JSONPath=`.metadata.labels.workbench\.sensorium\.dev/correlation-id`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Recording struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the Recording.
	// +required
	Spec RecordingSpec `json:"spec"`
	// status is the observed state of the Recording.
	// +optional
	Status RecordingStatus `json:"status,omitempty"`
}

// RecordingList is a list of Recordings.
// +kubebuilder:object:root=true
type RecordingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Recording `json:"items"`
}

func init() { SchemeBuilder.Register(&Recording{}, &RecordingList{}) }

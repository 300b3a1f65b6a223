package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SessionPhase is a one-word summary derived from conditions.
// +kubebuilder:validation:Enum=Requested;Starting;Running;Idle;Closing;Closed;Failed;Expired;Killed
type SessionPhase string

const (
	SessionRequested SessionPhase = "Requested"
	SessionStarting  SessionPhase = "Starting"
	SessionRunning   SessionPhase = "Running"
	SessionIdle      SessionPhase = "Idle"
	SessionClosing   SessionPhase = "Closing"
	SessionClosed    SessionPhase = "Closed"
	SessionFailed    SessionPhase = "Failed"
	SessionExpired   SessionPhase = "Expired"
	SessionKilled    SessionPhase = "Killed"
)

// ConditionCapacityAvailable is set by the manager on a session the node refused for its
// caps (session-cap-reached): False while the node's published free capacity
// (WorkbenchNode status.free) still has no slot for it, True — with lastTransitionTime the
// moment capacity returned — once it has. The refused session stays Failed; a client
// retries honestly by creating a new session after this turns True.
const ConditionCapacityAvailable = "CapacityAvailable"

// RawInput says who may write raw bytes to the PTY.
// +kubebuilder:validation:Enum=Disabled;OperatorOnly
type RawInput string

const (
	RawInputDisabled     RawInput = "Disabled"
	RawInputOperatorOnly RawInput = "OperatorOnly"
)

// SessionDesiredState is what the requester wants of a terminal session.
// +kubebuilder:validation:Enum=Open;Closed
type SessionDesiredState string

const (
	// SessionDesiredOpen keeps the session open.
	SessionDesiredOpen SessionDesiredState = "Open"
	// SessionDesiredClosed asks the node agent to close the session.
	SessionDesiredClosed SessionDesiredState = "Closed"
)

// TerminalSessionSpec is a bounded PTY on an environment.
// +kubebuilder:validation:XValidation:rule="self.environmentRef == oldSelf.environmentRef && (has(self.shellProfileRef) == has(oldSelf.shellProfileRef)) && (!has(self.shellProfileRef) || self.shellProfileRef == oldSelf.shellProfileRef)",message="immutable: environmentRef and shellProfileRef may not change"
// +kubebuilder:validation:XValidation:rule="has(self.createdBy) == has(oldSelf.createdBy) && (!has(self.createdBy) || self.createdBy == oldSelf.createdBy)",message="immutable: createdBy is stamped at creation"
type TerminalSessionSpec struct {
	// createdBy is the username that created the session — its owner — stamped by the
	// admission webhook from the request (whatever a client sends is overwritten) and
	// immutable. When the session is someone's terminal (it runs a shellProfileRef program,
	// takes raw input, or a TerminalView publishes it), only commands whose createdBy is this
	// owner may write into it; others are refused with session-not-owned.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	CreatedBy string `json:"createdBy,omitempty"`

	// environmentRef names the Environment.
	// +required
	EnvironmentRef ObjectName `json:"environmentRef"`

	// shellProfileRef names a CommandProfile (pty: Allowed) whose program runs interactively
	// on the PTY. Without it the session only hosts structured commands.
	// +optional
	ShellProfileRef *ObjectName `json:"shellProfileRef,omitempty"`

	// rows is the terminal height in character cells.
	// +optional
	// +kubebuilder:default=24
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=500
	Rows int32 `json:"rows,omitempty"`

	// cols is the terminal width in character cells.
	// +optional
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=1000
	Cols int32 `json:"cols,omitempty"`

	// idleTimeoutSeconds after which a session without output or input becomes Idle.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self <= 43200",message="timeout-above-max: at most 43200 seconds, the node ceiling (actuation.MaxSessionDurationSeconds)"
	IdleTimeoutSeconds int64 `json:"idleTimeoutSeconds,omitempty"`

	// maxDurationSeconds after which the session expires and is closed.
	// +optional
	// +kubebuilder:default=3600
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self <= 43200",message="timeout-above-max: at most 43200 seconds, the node ceiling (actuation.MaxSessionDurationSeconds)"
	MaxDurationSeconds int64 `json:"maxDurationSeconds,omitempty"`

	// rawInput says who may write raw bytes.
	// +optional
	// +kubebuilder:default=Disabled
	RawInput RawInput `json:"rawInput,omitempty"`

	// desiredState Closed asks the node agent to close the session.
	// +optional
	// +kubebuilder:default=Open
	DesiredState SessionDesiredState `json:"desiredState,omitempty"`
}

// SessionCleanup reports what closing left behind.
type SessionCleanup struct {
	// remainingProcesses counts processes of the session's group still alive.
	// +optional
	RemainingProcesses int32 `json:"remainingProcesses,omitempty"`
	// message explains what closing left behind.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// TerminalSessionStatus is the observed session. It never holds terminal bytes.
type TerminalSessionStatus struct {
	// phase summarizes the TerminalSession's conditions in one word, derived in one place; read
	// the conditions for detail.
	// +optional
	Phase SessionPhase `json:"phase,omitempty"`
	// nodeName is the node whose agent acts on the TerminalSession.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
	// lastSeq is the sequence number of the newest event.
	// +optional
	LastSeq int64 `json:"lastSeq,omitempty"`
	// screenDigest is the digest of the current viewport.
	// +optional
	ScreenDigest Digest `json:"screenDigest,omitempty"`
	// cleanup reports what closing the session left behind.
	// +optional
	Cleanup *SessionCleanup `json:"cleanup,omitempty"`
	// refusal is the stable code and message that refused the TerminalSession, when it was refused
	// (codes: docs/vocabulary.md).
	// +optional
	Refusal *Refusal `json:"refusal,omitempty"`
	// observedGeneration is the metadata.generation of the TerminalSession that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the TerminalSession's state, one per condition
	// type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TerminalSession is a bounded PTY on an environment.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbsess,categories=workbench
// +kubebuilder:selectablefield:JSONPath=`.spec.environmentRef`
// +kubebuilder:printcolumn:name="Environment",type=string,JSONPath=`.spec.environmentRef`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Seq",type=integer,JSONPath=`.status.lastSeq`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TerminalSession struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the TerminalSession.
	// +required
	Spec TerminalSessionSpec `json:"spec"`
	// status is the observed state of the TerminalSession.
	// +optional
	Status TerminalSessionStatus `json:"status,omitempty"`
}

// TerminalSessionList is a list of TerminalSessions.
// +kubebuilder:object:root=true
type TerminalSessionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerminalSession `json:"items"`
}

func init() { SchemeBuilder.Register(&TerminalSession{}, &TerminalSessionList{}) }

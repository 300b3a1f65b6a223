package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CommandPhase is a one-word summary derived from conditions.
// +kubebuilder:validation:Enum=Pending;AwaitingConsent;Running;Succeeded;Failed;TimedOut;Cancelled;Refused
type CommandPhase string

const (
	CommandPending         CommandPhase = "Pending"
	CommandAwaitingConsent CommandPhase = "AwaitingConsent"
	CommandRunning         CommandPhase = "Running"
	CommandSucceeded       CommandPhase = "Succeeded"
	CommandFailed          CommandPhase = "Failed"
	CommandTimedOut        CommandPhase = "TimedOut"
	CommandCancelled       CommandPhase = "Cancelled"
	CommandRefused         CommandPhase = "Refused"
)

// SignalOrigin says why a command ended.
// +kubebuilder:validation:Enum=exit;timeout;cancel;operator
type SignalOrigin string

// CommandDesiredState is what the proposer wants of a command after it was created.
// +kubebuilder:validation:Enum=Cancelled
type CommandDesiredState string

// CommandDesiredCancelled asks for the command to be stopped (or never started).
const CommandDesiredCancelled CommandDesiredState = "Cancelled"

// TerminalCommandSpec is a structured command intent: a profile plus argv as data. It is
// immutable once created, except that desiredState may be set to Cancelled.
// +kubebuilder:validation:XValidation:rule="self.sessionRef == oldSelf.sessionRef && self.profileRef == oldSelf.profileRef && self.argv == oldSelf.argv && self.cwd == oldSelf.cwd && has(self.env) == has(oldSelf.env) && (!has(self.env) || self.env == oldSelf.env) && has(self.timeoutSeconds) == has(oldSelf.timeoutSeconds) && (!has(self.timeoutSeconds) || self.timeoutSeconds == oldSelf.timeoutSeconds) && has(self.outputBytes) == has(oldSelf.outputBytes) && (!has(self.outputBytes) || self.outputBytes == oldSelf.outputBytes) && has(self.idempotencyKey) == has(oldSelf.idempotencyKey) && (!has(self.idempotencyKey) || self.idempotencyKey == oldSelf.idempotencyKey)",message="immutable: spec is immutable except desiredState (Cancelled)"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.desiredState) || (has(self.desiredState) && self.desiredState == oldSelf.desiredState)",message="immutable: a cancelled command stays cancelled"
// +kubebuilder:validation:XValidation:rule="has(self.createdBy) == has(oldSelf.createdBy) && (!has(self.createdBy) || self.createdBy == oldSelf.createdBy)",message="immutable: createdBy is stamped at creation"
type TerminalCommandSpec struct {
	// createdBy is the username that created the command, stamped by the admission webhook
	// from the request (whatever a client sends is overwritten) and immutable. A command may
	// write into a session that is someone's terminal (a PTY program, raw input, a published
	// view) only when createdBy is the session's createdBy (session-not-owned).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	CreatedBy string `json:"createdBy,omitempty"`

	// sessionRef names the TerminalSession (and through it the environment and node).
	// +required
	SessionRef ObjectName `json:"sessionRef"`

	// profileRef names the CommandProfile.
	// +required
	ProfileRef ObjectName `json:"profileRef"`

	// argv is data, never a shell string; argv[0] is the profile's executable.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=4096
	Argv []string `json:"argv"`

	// cwd is the working directory as a root name and a relative path.
	// +required
	Cwd CwdAddress `json:"cwd"`

	// env overrides, admitted only for keys the profile allows.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	Env []EnvVar `json:"env,omitempty"`

	// timeoutSeconds is the command's time limit in seconds, at most the profile's maxTimeoutSeconds.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self <= 3600",message="timeout-above-max: at most 3600 seconds, the node ceiling (actuation.MaxCommandTimeoutSeconds)"
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`

	// outputBytes is the shared stdout+stderr cap, at most the profile's maxOutputBytes.
	// +optional
	// +kubebuilder:default=65536
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self <= 16777216",message="output-cap-above-max: at most 16777216 bytes, the node ceiling (actuation.MaxCommandOutputBytes)"
	OutputBytes int64 `json:"outputBytes,omitempty"`

	// idempotencyKey de-duplicates replays of the same intent.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:-]*$`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`

	// desiredState Cancelled stops the command: a running process group is terminated
	// (SIGTERM, then SIGKILL after the grace period) and the outcome is Cancelled with
	// signalOrigin cancel; a command not started yet never starts. It is the only spec
	// field that may change, and only from unset to Cancelled.
	// +optional
	DesiredState CommandDesiredState `json:"desiredState,omitempty"`
}

// TerminalCommandStatus is the single recorded outcome of a command. Once recorded
// (Completed=True) the outcome is never replaced, whoever writes: a stale write of an
// earlier state (e.g. a killed node agent's in-flight apply landing after its successor
// wrote the outcome) is refused by the API server.
// +kubebuilder:validation:XValidation:rule="!(has(oldSelf.conditions) && oldSelf.conditions.exists(c, c.type == 'Completed' && c.status == 'True')) || (has(self.conditions) && self.conditions.exists(c, c.type == 'Completed' && c.status == 'True' && oldSelf.conditions.exists(o, o.type == 'Completed' && o.reason == c.reason)))",message="immutable: a recorded outcome (Completed=True and its reason) is never replaced"
// +kubebuilder:validation:XValidation:rule="!(has(oldSelf.conditions) && oldSelf.conditions.exists(c, c.type == 'Completed' && c.status == 'True')) || (has(self.exitCode) == has(oldSelf.exitCode) && (!has(oldSelf.exitCode) || self.exitCode == oldSelf.exitCode) && has(self.refusal) == has(oldSelf.refusal) && (!has(oldSelf.refusal) || self.refusal.code == oldSelf.refusal.code))",message="immutable: the exit code and refusal of a recorded outcome never change"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.decidedBy) || (has(self.decidedBy) && self.decidedBy == oldSelf.decidedBy)",message="immutable: decidedBy names the one writer of the admission and phase; it is never changed or removed"
type TerminalCommandStatus struct {
	// commandID is assigned by the host.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	CommandID string `json:"commandID,omitempty"`
	// argvDigest covers argv, cwd and profile ref.
	// +optional
	ArgvDigest Digest `json:"argvDigest,omitempty"`
	// phase summarizes the TerminalCommand's conditions in one word, derived in one place; read
	// the conditions for detail.
	// +optional
	Phase CommandPhase `json:"phase,omitempty"`
	// admittedBy is "profile" or the ConsentGrant that admitted the argv.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	AdmittedBy string `json:"admittedBy,omitempty"`
	// decidedBy names the one component that decided this command's admission and writes
	// its admission record, phase and health for the rest of its life: "node" when the
	// node agent it is bound to admitted it itself (the one-hop path), "manager" when the
	// manager's gate decided it (held, refused, cancelled, or admitted after consent or
	// after the node left it). Set once, in the write that decides; never changed.
	// +optional
	// +kubebuilder:validation:Enum=manager;node
	DecidedBy PhaseWriter `json:"decidedBy,omitempty"`
	// admittedContext is the environment's effective operational context the manager's
	// admission was made under. When the environment's context has changed since, the
	// admission is superseded: the node does not start the command and the manager
	// re-evaluates it under the new context.
	// +optional
	AdmittedContext ContextClass `json:"admittedContext,omitempty"`
	// exitCode is the process exit code, when the process exited normally.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// signalOrigin says who ended the process by a signal, when one did.
	// +optional
	SignalOrigin SignalOrigin `json:"signalOrigin,omitempty"`
	// stdoutBytes counts output bytes seen (stdout and stderr share one budget).
	// +optional
	StdoutBytes int64 `json:"stdoutBytes,omitempty"`
	// truncated says the captured output was cut at its cap.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// outputDigest is the digest of the retained output.
	// +optional
	OutputDigest Digest `json:"outputDigest,omitempty"`
	// seqFrom is the session output sequence number where the command's output starts.
	// +optional
	SeqFrom int64 `json:"seqFrom,omitempty"`
	// seqTo is the session output sequence number where the command's output ends.
	// +optional
	SeqTo int64 `json:"seqTo,omitempty"`
	// refusal is the stable code and message that refused the TerminalCommand, when it was refused
	// (codes: docs/vocabulary.md).
	// +optional
	Refusal *Refusal `json:"refusal,omitempty"`
	// consentRequestRef names the ConsentRequest the command waits on, when it needs consent.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ConsentRequestRef string `json:"consentRequestRef,omitempty"`
	// nodeName is the node whose agent acts on the TerminalCommand.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
	// startTime is when the node started the TerminalCommand.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when the TerminalCommand reached a final phase.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// observedGeneration is the metadata.generation of the TerminalCommand that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the TerminalCommand's state, one per condition
	// type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TerminalCommand is a structured command intent with exactly one recorded outcome.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbcmd,categories=workbench
// +kubebuilder:selectablefield:JSONPath=`.spec.sessionRef`
// +kubebuilder:printcolumn:name="Session",type=string,JSONPath=`.spec.sessionRef`
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.spec.profileRef`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Exit",type=integer,JSONPath=`.status.exitCode`
// +kubebuilder:printcolumn:name="Refusal",type=string,JSONPath=`.status.refusal.code`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TerminalCommand struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the TerminalCommand.
	// +required
	Spec TerminalCommandSpec `json:"spec"`
	// status is the observed state of the TerminalCommand.
	// +optional
	Status TerminalCommandStatus `json:"status,omitempty"`
}

// TerminalCommandList is a list of TerminalCommands.
// +kubebuilder:object:root=true
type TerminalCommandList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerminalCommand `json:"items"`
}

func init() { SchemeBuilder.Register(&TerminalCommand{}, &TerminalCommandList{}) }

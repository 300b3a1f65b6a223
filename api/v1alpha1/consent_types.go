package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ConsentScope is an operator's choice, ordered from narrow to broad.
// +kubebuilder:validation:Enum=deny;allow-once;remember-exact-argv;remember-argv-prefix;add-to-catalog
type ConsentScope string

const (
	ConsentDeny               ConsentScope = "deny"
	ConsentAllowOnce          ConsentScope = "allow-once"
	ConsentRememberExactArgv  ConsentScope = "remember-exact-argv"
	ConsentRememberArgvPrefix ConsentScope = "remember-argv-prefix"
	// ConsentAddToCatalog is offered only for C7 ActionRuns: the run stays refused and the
	// manager proposes an unsigned ActionCatalog remembering the action, which runs only
	// once a signer signs it (see docs/actions.md).
	ConsentAddToCatalog ConsentScope = "add-to-catalog"
)

// ConsentCapability is the capability a consent request concerns.
// +kubebuilder:validation:Enum=workbench.terminal.command;workbench.action.run
type ConsentCapability string

// CapabilityTerminalCommand is the capability of structured terminal commands.
const CapabilityTerminalCommand ConsentCapability = "workbench.terminal.command"

// CapabilityActionRun is the capability of a C7 (operator-gated) ActionRun: commandRef and
// commandUID name the ActionRun, profileRef its ActionCatalog, argv the rendered argv. Its
// grants are never projected into a CommandProfile.
const CapabilityActionRun ConsentCapability = "workbench.action.run"

// SafetyCaps are the caps a grant can never loosen.
type SafetyCaps struct {
	// timeoutSeconds is the longest a consented command may run, in seconds.
	// +required
	TimeoutSeconds int64 `json:"timeoutSeconds"`
	// outputBytes is the most output bytes a consented command may produce.
	// +required
	OutputBytes int64 `json:"outputBytes"`
	// egress is the network egress a consented command is allowed.
	// +required
	Egress EgressPolicy `json:"egress"`
	// credentials is the credential access a consented command is allowed.
	// +required
	Credentials CredentialPolicy `json:"credentials"`
	// gitMetadata is whether a consented command may write repository metadata the host's
	// git executes (the profile's gitMetadata).
	// +optional
	GitMetadata GitMetadataPolicy `json:"gitMetadata,omitempty"`
}

// ConsentDescriptor is the concrete effect put to the operator.
type ConsentDescriptor struct {
	// capability names what consent is asked for.
	// +required
	Capability ConsentCapability `json:"capability"`
	// commandRef names the TerminalCommand that was not admitted.
	// +required
	CommandRef ObjectName `json:"commandRef"`
	// commandUID is the UID of that command object. An allow-once grant admits only this
	// object: a command deleted and recreated under the same name is another object and is
	// never admitted by it.
	// +required
	CommandUID types.UID `json:"commandUID"`
	// profileRef names the CommandProfile the command runs under.
	// +required
	ProfileRef ObjectName `json:"profileRef"`
	// environmentRef is the workspace the operator reviews the command on. Every grant of
	// this request, remembered ones too, admits only on this environment.
	// +required
	EnvironmentRef ObjectName `json:"environmentRef"`
	// environmentUID is the UID of that Environment object, stamped by the manager: a grant
	// of this request admits only on this very object, never on an Environment deleted and
	// recreated under the same name.
	// +optional
	EnvironmentUID types.UID `json:"environmentUID,omitempty"`
	// operationalContext is the environment's effective operational context the operator
	// reviews the command under, stamped by the manager when it asks. A remembered grant of
	// this request admits only while the environment's context is this class or a lower
	// one: once the context is raised, the operator is asked again, under the new class.
	// +optional
	OperationalContext ContextClass `json:"operationalContext,omitempty"`
	// rememberedSpan states what a remembered grant of this request would span.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	RememberedSpan string `json:"rememberedSpan,omitempty"`
	// argv is the exact argument vector consent is asked for.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=4096
	Argv []string `json:"argv"`
	// argvDigest is the digest of argv; a grant binds to it.
	// +required
	ArgvDigest Digest `json:"argvDigest"`
	// cwd is where the command runs.
	// +required
	Cwd CwdAddress `json:"cwd"`
	// roots the profile allows.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=63
	Roots []string `json:"roots,omitempty"`
	// safetyCaps are the caps the command runs under; a grant never loosens them.
	// +required
	SafetyCaps SafetyCaps `json:"safetyCaps"`
	// requester is the identity whose command asked (its createdBy), stamped by the manager.
	// A deny cools down per requester and argv (the WorkbenchPolicy's consent.denyCooldownSeconds).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Requester string `json:"requester,omitempty"`
	// reasonCode is why the effect was not admitted (argv-not-admitted).
	// +required
	// +kubebuilder:validation:MaxLength=63
	ReasonCode string `json:"reasonCode"`
}

// ConsentDecision is the lifecycle of a consent request.
// +kubebuilder:validation:Enum=Pending;Granted;Denied;Expired;Revoked
type ConsentDecision string

const (
	DecisionPending ConsentDecision = "Pending"
	DecisionGranted ConsentDecision = "Granted"
	DecisionDenied  ConsentDecision = "Denied"
	DecisionExpired ConsentDecision = "Expired"
	DecisionRevoked ConsentDecision = "Revoked"
)

// ConsentRequestSpec is a refused effect eligible for operator approval.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="immutable: spec is immutable"
type ConsentRequestSpec struct {
	// descriptor is what is asked for, as data an operator can read and a grant can bind to.
	// +required
	Descriptor ConsentDescriptor `json:"descriptor"`
	// options the operator may choose.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	Options []ConsentScope `json:"options"`
	// timeoutSeconds after which the request expires, failing closed (deny).
	// +optional
	// +kubebuilder:default=900
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
}

// ConsentRequestStatus is the decision.
type ConsentRequestStatus struct {
	// decision is the operator's decision on the request.
	// +optional
	Decision ConsentDecision `json:"decision,omitempty"`
	// approvalRef is approval:consent:<deltaDigest> of the granting decision.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ApprovalRef string `json:"approvalRef,omitempty"`
	// grantRef names the ConsentGrant that approved the request.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	GrantRef string `json:"grantRef,omitempty"`
	// expiresAt is when the request lapses if no one decides it.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// decidedAt is when the request was decided.
	// +optional
	DecidedAt *metav1.Time `json:"decidedAt,omitempty"`
	// observedGeneration is the metadata.generation of the ConsentRequest that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the ConsentRequest's state, one per condition
	// type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ConsentRequest is a refused effect eligible for operator approval. Only the manager
// creates them.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbcr,categories=workbench
// +kubebuilder:printcolumn:name="Command",type=string,JSONPath=`.spec.descriptor.commandRef`
// +kubebuilder:printcolumn:name="Environment",type=string,JSONPath=`.spec.descriptor.environmentRef`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.status.decision`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiresAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ConsentRequest struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the ConsentRequest.
	// +required
	Spec ConsentRequestSpec `json:"spec"`
	// status is the observed state of the ConsentRequest.
	// +optional
	Status ConsentRequestStatus `json:"status,omitempty"`
}

// ConsentRequestList is a list of ConsentRequests.
// +kubebuilder:object:root=true
type ConsentRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ConsentRequest `json:"items"`
}

// ConsentGrantSpec is an operator's decision on a ConsentRequest. Only a subject allowed
// to approve consentrequests may create one; the operator identity is stamped from the
// admission request and can never be set by the client.
// +kubebuilder:validation:XValidation:rule="has(self.requestUID) == has(oldSelf.requestUID) && (!has(self.requestUID) || self.requestUID == oldSelf.requestUID)",message="immutable: only revoked may change"
// +kubebuilder:validation:XValidation:rule="self.requestRef == oldSelf.requestRef && self.scope == oldSelf.scope && self.operator == oldSelf.operator && has(self.operatorGroups) == has(oldSelf.operatorGroups) && (!has(self.operatorGroups) || self.operatorGroups == oldSelf.operatorGroups) && has(self.prefixLength) == has(oldSelf.prefixLength) && (!has(self.prefixLength) || self.prefixLength == oldSelf.prefixLength) && has(self.variablePrefixes) == has(oldSelf.variablePrefixes) && (!has(self.variablePrefixes) || self.variablePrefixes == oldSelf.variablePrefixes) && has(self.expiresAt) == has(oldSelf.expiresAt) && (!has(self.expiresAt) || self.expiresAt == oldSelf.expiresAt)",message="immutable: only revoked may change"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.revoked) || !oldSelf.revoked || (has(self.revoked) && self.revoked)",message="consent-revoked: a revoked grant stays revoked"
// +kubebuilder:validation:XValidation:rule="self.scope == 'remember-argv-prefix' ? has(self.prefixLength) : (!has(self.prefixLength) && !has(self.variablePrefixes))",message="consent-scope-invalid: prefixLength and variablePrefixes belong to remember-argv-prefix, which requires prefixLength"
type ConsentGrantSpec struct {
	// requestRef names the ConsentRequest this grant answers.
	// +required
	RequestRef ObjectName `json:"requestRef"`
	// requestUID is stamped by the admission webhook from the request the grant answers; a
	// grant decides only that request object, never a later one reusing its name.
	// +optional
	RequestUID types.UID `json:"requestUID,omitempty"`
	// scope is how far the grant reaches beyond the one request.
	// +required
	Scope ConsentScope `json:"scope"`
	// prefixLength is how many leading argv atoms of the request form the remembered prefix.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	PrefixLength *int32 `json:"prefixLength,omitempty"`
	// variablePrefixes admitted after the prefix (at most 8).
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	VariablePrefixes []string `json:"variablePrefixes,omitempty"`
	// expiresAt ends a remembered grant; the manager caps it.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// revoked ends the grant; once true it stays true.
	// +optional
	Revoked *bool `json:"revoked,omitempty"`
	// operator is stamped by the admission webhook from the request's user; a value the
	// client sets is overwritten on create and may never change.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Operator string `json:"operator,omitempty"`
	// operatorGroups are stamped with operator, so the manager can recheck the operator's
	// right to approve with SubjectAccessReview.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=256
	OperatorGroups []string `json:"operatorGroups,omitempty"`
	// reason is the operator's note.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// ConsentGrantState is a ConsentGrant's effective state.
// +kubebuilder:validation:Enum=Active;Consumed;Denied;Revoked;Expired;Unbound
type ConsentGrantState string

// The states of a ConsentGrant; only Active authorizes.
const (
	ConsentGrantActive   ConsentGrantState = "Active"
	ConsentGrantConsumed ConsentGrantState = "Consumed"
	ConsentGrantDenied   ConsentGrantState = "Denied"
	ConsentGrantRevoked  ConsentGrantState = "Revoked"
	ConsentGrantExpired  ConsentGrantState = "Expired"
	ConsentGrantUnbound  ConsentGrantState = "Unbound"
)

// ConsentGrantStatus is the effective state of the grant.
type ConsentGrantStatus struct {
	// deltaDigest is the digest of what the grant adds to the command profile.
	// +optional
	DeltaDigest Digest `json:"deltaDigest,omitempty"`
	// approvalRef identifies the approval that created the grant.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ApprovalRef string `json:"approvalRef,omitempty"`
	// operator is the authenticated user who approved the grant.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Operator string `json:"operator,omitempty"`
	// state is the grant's effective state: Active while it may authorize a command;
	// Consumed once an allow-once grant admitted its command; Denied for a deny decision;
	// Revoked after spec.revoked; Expired after its expiry; Unbound when its request is gone
	// or its operator may no longer approve consent requests.
	// +optional
	State ConsentGrantState `json:"state,omitempty"`
	// consumedBy names the command an allow-once grant admitted.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ConsumedBy string `json:"consumedBy,omitempty"`
	// consumedByUID is the UID of that command object.
	// +optional
	ConsumedByUID types.UID `json:"consumedByUID,omitempty"`
	// diagnostics are coded observations about the grant.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	Diagnostics []Diagnostic `json:"diagnostics,omitempty"`
	// observedGeneration is the metadata.generation of the ConsentGrant that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the ConsentGrant's state, one per condition type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ConsentGrant is an operator's decision.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbgrant,categories=workbench
// +kubebuilder:printcolumn:name="Request",type=string,JSONPath=`.spec.requestRef`
// +kubebuilder:printcolumn:name="Scope",type=string,JSONPath=`.spec.scope`
// +kubebuilder:printcolumn:name="Operator",type=string,JSONPath=`.spec.operator`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ConsentGrant struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the ConsentGrant.
	// +required
	Spec ConsentGrantSpec `json:"spec"`
	// status is the observed state of the ConsentGrant.
	// +optional
	Status ConsentGrantStatus `json:"status,omitempty"`
}

// ConsentGrantList is a list of ConsentGrants.
// +kubebuilder:object:root=true
type ConsentGrantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ConsentGrant `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ConsentRequest{}, &ConsentRequestList{}, &ConsentGrant{}, &ConsentGrantList{})
}

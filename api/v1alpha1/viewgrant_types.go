package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ViewSubjectKind is the kind of identity a ViewGrant names.
// +kubebuilder:validation:Enum=User;Group;ServiceAccount
type ViewSubjectKind string

// Subject kinds (as in RBAC subjects).
const (
	ViewSubjectUser           ViewSubjectKind = "User"
	ViewSubjectGroup          ViewSubjectKind = "Group"
	ViewSubjectServiceAccount ViewSubjectKind = "ServiceAccount"
)

// ViewSubject is exactly one identity: a user, a group, or a ServiceAccount (with its
// namespace).
// +kubebuilder:validation:XValidation:rule="self.kind == 'ServiceAccount' ? has(self.__namespace__) : !has(self.__namespace__)",message="view-subject-invalid: namespace is required for a ServiceAccount and only for it"
type ViewSubject struct {
	// kind is the kind of subject (user, group or service account).
	// +required
	Kind ViewSubjectKind `json:"kind"`
	// name is the subject's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Name string `json:"name"`
	// namespace is the service account's namespace, for a service account subject.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// ViewGrantSpec is one subject's exact, expiring, revocable right to observe one
// TerminalView. Only a subject allowed the virtual verb grant on terminalviews may create
// or revoke one; the granting identity is stamped from the admission request.
// +kubebuilder:validation:XValidation:rule="self.viewRef == oldSelf.viewRef && self.subject == oldSelf.subject && self.expiresAt == oldSelf.expiresAt && self.grantedBy == oldSelf.grantedBy && has(self.viewUID) == has(oldSelf.viewUID) && (!has(self.viewUID) || self.viewUID == oldSelf.viewUID) && has(self.grantedByGroups) == has(oldSelf.grantedByGroups) && (!has(self.grantedByGroups) || self.grantedByGroups == oldSelf.grantedByGroups)",message="immutable: only revoked may change"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.revoked) || !oldSelf.revoked || (has(self.revoked) && self.revoked)",message="view-grant-revoked: a revoked grant stays revoked"
type ViewGrantSpec struct {
	// viewRef names the TerminalView.
	// +required
	ViewRef ObjectName `json:"viewRef"`
	// viewUID is stamped by the admission webhook: the grant covers that view object only,
	// never a later one reusing its name.
	// +optional
	ViewUID types.UID `json:"viewUID,omitempty"`
	// subject is the one identity the grant names.
	// +required
	Subject ViewSubject `json:"subject"`
	// expiresAt ends the grant; it is required and at most 24 hours after creation.
	// +required
	ExpiresAt metav1.Time `json:"expiresAt"`
	// revoked ends the grant now; once true it stays true.
	// +optional
	Revoked *bool `json:"revoked,omitempty"`
	// grantedBy is stamped from the admission request's user; a client value is overwritten.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	GrantedBy string `json:"grantedBy,omitempty"`
	// grantedByGroups are stamped with grantedBy.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=256
	GrantedByGroups []string `json:"grantedByGroups,omitempty"`
	// reason is the operator's note.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// ViewGrantState is a ViewGrant's effective state.
// +kubebuilder:validation:Enum=Active;Inactive
type ViewGrantState string

// The states of a ViewGrant; only Active admits its subject.
const (
	ViewGrantActive   ViewGrantState = "Active"
	ViewGrantInactive ViewGrantState = "Inactive"
)

// ViewGrantStatus is the grant's effective state as the node publishing the view sees it.
type ViewGrantStatus struct {
	// state is Active while the grant admits its subject (not revoked, not expired, its
	// view publishing) and Inactive otherwise, with the refusal code in reason.
	// +optional
	State ViewGrantState `json:"state,omitempty"`
	// reason is the refusal code while inactive (view-grant-revoked, view-grant-expired,
	// view-context-superseded, ...).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Reason string `json:"reason,omitempty"`
	// observedGeneration is the metadata.generation of the ViewGrant that this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the ViewGrant's state, one per condition type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ViewGrant is one subject's right to observe a TerminalView.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vgrant,categories=workbench
// +kubebuilder:printcolumn:name="View",type=string,JSONPath=`.spec.viewRef`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.subject.kind`
// +kubebuilder:printcolumn:name="Subject",type=string,JSONPath=`.spec.subject.name`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.spec.expiresAt`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
type ViewGrant struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the ViewGrant.
	// +required
	Spec ViewGrantSpec `json:"spec"`
	// status is the observed state of the ViewGrant.
	// +optional
	Status ViewGrantStatus `json:"status,omitempty"`
}

// ViewGrantList is a list of ViewGrants.
// +kubebuilder:object:root=true
type ViewGrantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ViewGrant `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ViewGrant{}, &ViewGrantList{})
}

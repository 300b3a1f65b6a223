package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ViewPublication names what a TerminalView publishes. The vocabulary is closed and holds
// one value: the visible screen (a bounded latest-state viewport). Ordered terminal events,
// input, resize and signal are never published to observers.
// +kubebuilder:validation:Enum=Screen
type ViewPublication string

// ViewPublishScreen publishes the visible screen only.
const ViewPublishScreen ViewPublication = "Screen"

// ViewPhase is a one-word summary of a TerminalView's Publishing condition.
// +kubebuilder:validation:Enum=Publishing;Superseded;Refused;Unavailable
type ViewPhase string

// View phases.
const (
	ViewPublishing  ViewPhase = "Publishing"
	ViewSuperseded  ViewPhase = "Superseded"
	ViewRefused     ViewPhase = "Refused"
	ViewUnavailable ViewPhase = "Unavailable"
)

// ConditionPublishing is true while a TerminalView delivers frames to its granted observers.
const ConditionPublishing = "Publishing"

// ViewBinding is the exact environment a TerminalView was admitted against, stamped by the
// admission webhook at creation and immutable. When the environment is replaced (new UID),
// gets a new source generation, or its operational context changes, the view is superseded:
// its observers are refused with view-context-superseded and must be granted again on a new
// view.
type ViewBinding struct {
	// environmentRef names the Environment the view is bound to.
	// +required
	EnvironmentRef ObjectName `json:"environmentRef"`
	// environmentUID is the UID of the bound Environment, so a recreated one with the same name is
	// not shown.
	// +required
	EnvironmentUID types.UID `json:"environmentUID"`
	// sourceGeneration of the environment at admission.
	// +required
	SourceGeneration int64 `json:"sourceGeneration"`
	// operationalContext is the environment's context class at admission (the higher of its
	// effective and declared class); every frame carries it.
	// +required
	OperationalContext ContextClass `json:"operationalContext"`
}

// TerminalViewSpec publishes the latest visible screen of one session to granted observers.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.binding) || (has(self.binding) && self.binding == oldSelf.binding)",message="immutable: binding is stamped at admission and may not change"
// +kubebuilder:validation:XValidation:rule="self.classificationCeiling == oldSelf.classificationCeiling",message="immutable: classificationCeiling may not change"
type TerminalViewSpec struct {
	// sessionRef is the published TerminalSession. The operator may re-point it to another
	// session of the same environment (e.g. after the node agent restarted and the old PTY
	// was swept); the binding, and so every grant, stays.
	// +required
	SessionRef ObjectName `json:"sessionRef"`

	// publish is what observers receive: Screen, the bounded visible viewport, only.
	// +optional
	// +kubebuilder:default=Screen
	Publish ViewPublication `json:"publish,omitempty"`

	// classificationCeiling is the highest operational context this view may publish. An
	// environment above it is refused at admission and at every frame
	// (view-classification-exceeded).
	// +required
	ClassificationCeiling ContextClass `json:"classificationCeiling"`

	// freshnessSeconds bounds how old the newest frame an observer holds may be: when the
	// screen does not change, the stream re-sends its digest (a heartbeat) at this interval.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	FreshnessSeconds *int32 `json:"freshnessSeconds,omitempty"`

	// maxFrameBytes bounds the screen text of one frame; lines beyond it are cut and the
	// frame says truncated.
	// +optional
	// +kubebuilder:default=16384
	// +kubebuilder:validation:Minimum=256
	// +kubebuilder:validation:Maximum=65536
	MaxFrameBytes *int32 `json:"maxFrameBytes,omitempty"`

	// minFrameIntervalMillis is the rate bound: frames of one stream are at least this far
	// apart; screens in between are coalesced into the latest.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=50
	// +kubebuilder:validation:Maximum=10000
	MinFrameIntervalMillis *int32 `json:"minFrameIntervalMillis,omitempty"`

	// binding is stamped by the admission webhook from the session's environment; a value
	// the client sets is overwritten on create.
	// +optional
	Binding *ViewBinding `json:"binding,omitempty"`
}

// TerminalViewStatus is the observed publication.
type TerminalViewStatus struct {
	// phase summarizes the TerminalView's conditions in one word, derived in one place; read the
	// conditions for detail.
	// +optional
	Phase ViewPhase `json:"phase,omitempty"`
	// environmentGeneration is the bound environment's source generation.
	// +optional
	EnvironmentGeneration int64 `json:"environmentGeneration,omitempty"`
	// operationalContext is the bound context every frame carries.
	// +optional
	OperationalContext ContextClass `json:"operationalContext,omitempty"`
	// refusal is the code observers are refused with while the view does not publish.
	// +optional
	Refusal *Refusal `json:"refusal,omitempty"`
	// observedGeneration is the metadata.generation of the TerminalView that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the TerminalView's state, one per condition type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TerminalView is a read-only latest-state publication of a session's visible screen.
// Delivery to an observer needs BOTH RBAC get on terminalviews/stream (group
// subresources.workbench.sensorium.dev) AND an active ViewGrant naming them, checked for
// every frame.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tview,categories=workbench
// +kubebuilder:printcolumn:name="Session",type=string,JSONPath=`.spec.sessionRef`
// +kubebuilder:printcolumn:name="Context",type=string,JSONPath=`.spec.binding.operationalContext`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TerminalView struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the TerminalView.
	// +required
	Spec TerminalViewSpec `json:"spec"`
	// status is the observed state of the TerminalView.
	// +optional
	Status TerminalViewStatus `json:"status,omitempty"`
}

// TerminalViewList is a list of TerminalViews.
// +kubebuilder:object:root=true
type TerminalViewList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerminalView `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TerminalView{}, &TerminalViewList{})
}

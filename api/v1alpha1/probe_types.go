package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProbeResult is the outcome of one active check.
// +kubebuilder:validation:Enum=Pending;Pass;Fail;Error
type ProbeResult string

// ProbeSpec is one active bounded check, now.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="immutable: spec is immutable"
type ProbeSpec struct {
	// scope names exactly one observed source.
	// +required
	Scope *Scope `json:"scope,omitempty"`
	// condition to check.
	// +required
	Condition WaitCondition `json:"condition"`
	// timeoutSeconds bounds the check.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=30
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// ProbeStatus is the probe's outcome.
type ProbeStatus struct {
	// result is the probe's answer.
	// +optional
	Result ProbeResult `json:"result,omitempty"`
	// observedAt is when the node evaluated the probe.
	// +optional
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`
	// observed is what the probe saw, as sequence numbers and digests only.
	// +optional
	Observed *Observed `json:"observed,omitempty"`
	// diagnostics are coded observations about the probe's evaluation.
	// +optional
	// +kubebuilder:validation:MaxItems=5
	// +listType=set
	Diagnostics []WaitDiagnostic `json:"diagnostics,omitempty"`
	// refusal is the stable code and message that refused the Probe, when it was refused (codes:
	// docs/vocabulary.md).
	// +optional
	Refusal *Refusal `json:"refusal,omitempty"`
	// observedGeneration is the metadata.generation of the Probe that this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the Probe's state, one per condition type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Probe is one active bounded check.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbprobe,categories=workbench
// +kubebuilder:printcolumn:name="Condition",type=string,JSONPath=`.spec.condition.kind`
// +kubebuilder:printcolumn:name="Result",type=string,JSONPath=`.status.result`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Probe struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the Probe.
	// +required
	Spec ProbeSpec `json:"spec"`
	// status is the observed state of the Probe.
	// +optional
	Status ProbeStatus `json:"status,omitempty"`
}

// ProbeList is a list of Probes.
// +kubebuilder:object:root=true
type ProbeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Probe `json:"items"`
}

func init() { SchemeBuilder.Register(&Probe{}, &ProbeList{}) }

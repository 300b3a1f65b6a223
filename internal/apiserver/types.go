package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The group's kinds only name the parents of the subresources in discovery: the objects
// themselves live in workbench.sensorium.dev (CRDs) and are never served here.

// TerminalSession is the parent of terminalsessions/{attach,screen,events,resize,signal}.
// +kubebuilder:object:generate=true
// +kubebuilder:object:root=true
type TerminalSession struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// TerminalCommand is the parent of terminalcommands/{output,cancel}.
// +kubebuilder:object:generate=true
// +kubebuilder:object:root=true
type TerminalCommand struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// Environment is the parent of environments/files.
// +kubebuilder:object:generate=true
// +kubebuilder:object:root=true
type Environment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// Artifact is the parent of artifacts/{download,upload}.
// +kubebuilder:object:generate=true
// +kubebuilder:object:root=true
type Artifact struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// TerminalView is the parent of terminalviews/stream.
// +kubebuilder:object:generate=true
// +kubebuilder:object:root=true
type TerminalView struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

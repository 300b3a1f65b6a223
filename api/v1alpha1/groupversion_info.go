// Package v1alpha1 contains the workbench.sensorium.dev/v1alpha1 API: environments, command
// profiles, terminal sessions and commands, waits and probes, file patches, artifacts, consent,
// backend capabilities, image manifests and node self-reports.
//
// +kubebuilder:object:generate=true
// +groupName=workbench.sensorium.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of these objects.
	GroupVersion = schema.GroupVersion{Group: "workbench.sensorium.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this group version.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // SA1019: the kubebuilder layout; every kind's init() registers through it

	// AddToScheme adds the types of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

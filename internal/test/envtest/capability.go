package envtest

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// HostLocalCapability is what a node agent attests for host-local on node: suites without
// a node agent create it so that the manager can place host-local environments there.
func HostLocalCapability(node string) *wbv1.BackendCapability {
	return &wbv1.BackendCapability{
		ObjectMeta: metav1.ObjectMeta{Name: node + ".host-local"},
		Spec: wbv1.BackendCapabilitySpec{
			NodeName: node, BackendID: wbv1.BackendHostLocal, Provider: "workbench", Version: "v1alpha1",
			PlatformRef: "linux-x86_64", Locality: wbv1.LocalityLocalOnly, HostArchitecture: wbv1.ArchitectureX8664, GuestArchitecture: wbv1.ArchitectureX8664,
			IsolationClass: "none", SystemFidelity: "filesystem-view", ControlTransport: wbv1.ControlTransportLocalProcess,
			ControlGuestEndpoint: wbv1.ControlGuestEndpointNone, ControlHostEndpoint: wbv1.ControlHostEndpointNone, ControlChannelBinding: wbv1.ControlChannelBindingNone,
			BootMode: wbv1.BackendBootModeNone, ConsoleMode: wbv1.ConsoleModeNone, NetworkProfiles: []string{"none"}, HostFilesystemSharing: "read-write",
			CredentialInjection: "denied", ResourceEnforcement: []string{"host-process"},
			LifecycleOperations: []string{"allocate", "inspect", "teardown", "recover"},
		},
	}
}

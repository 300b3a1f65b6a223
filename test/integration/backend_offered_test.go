package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// vfkitCapability is what a macOS node agent attests for vfkit-system.v1
// (internal/backends/vfkitsystem.Capability).
func vfkitCapability(node string) *wbv1.BackendCapability {
	return &wbv1.BackendCapability{
		ObjectMeta: metav1.ObjectMeta{Name: node + ".vfkit-system.v1"},
		Spec: wbv1.BackendCapabilitySpec{
			NodeName: node, BackendID: wbv1.BackendVfkit, Provider: "apple-virtualization", Version: "v1alpha1",
			PlatformRef: "macos-vz-arm64.v1/15.1", Locality: wbv1.LocalityLocalOnly, HostArchitecture: wbv1.ArchitectureARM64, GuestArchitecture: wbv1.ArchitectureARM64,
			IsolationClass: "hardware-vm", SystemFidelity: "full-system-linux", ControlTransport: wbv1.ControlTransportVirtioVsock,
			ControlGuestEndpoint: wbv1.ControlGuestEndpointAFVsock, ControlHostEndpoint: wbv1.ControlHostEndpointUnixDomainSocket,
			ControlChannelBinding: wbv1.ControlChannelBindingEnvironmentGenerationBootNonce, BootMode: wbv1.BackendBootModeEFI,
			StorageFormats: []string{"raw"}, DeviceClasses: []string{"diagnostic-serial", "virtio-block", "virtio-rng", "virtio-vsock"},
			ConsoleMode: "diagnostic-output-only", NetworkProfiles: []string{"none"}, HostFilesystemSharing: "denied", CredentialInjection: "denied",
			ResourceEnforcement: []string{"guest-vcpu", "guest-memory", "guest-storage", "channel-bounds"},
			LifecycleOperations: []string{"allocate", "start", "inspect", "drain", "teardown", "recover"},
		},
	}
}

func vmEnvironment(ns, name string, backend wbv1.BackendID) *wbv1.Environment {
	return &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: backend, ImageRef: ptr("full-system"), Roots: []wbv1.EnvironmentRoot{{Name: "workspace"}},
	}}
}

// TestBackendsNoNodeCanOfferAreRefused: an Environment naming a backend this build has no
// implementation of is refused at admission with backend-not-offered — even when a node
// claims a capability for it — instead of being admitted and parked unscheduled; an
// Environment of an implemented backend is admitted, and a vfkit-system.v1 one is placed on
// the macOS node that attests it.
func TestBackendsNoNodeCanOfferAreRefused(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	// A node claiming cloud-hypervisor-system.v1 does not make it runnable.
	claim := vfkitCapability("wb-claims-ch")
	claim.Name = "wb-claims-ch.cloud-hypervisor-system.v1"
	claim.Spec.BackendID = wbv1.BackendCloudHypervisor
	claim.Spec.HostArchitecture, claim.Spec.GuestArchitecture = wbv1.ArchitectureX8664, wbv1.ArchitectureX8664
	must(t, env.Client.Create(ctx, claim))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), claim) })
	for _, b := range []wbv1.BackendID{wbv1.BackendCloudHypervisor, wbv1.BackendFirecracker} {
		mustRefuse(t, env.Client.Create(ctx, vmEnvironment(ns, "e-"+string(b[:5]), b)), "backend-not-offered")
	}

	capObj := vfkitCapability("wb-mac-1")
	must(t, env.Client.Create(ctx, capObj))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), capObj) })
	must(t, env.Client.Create(ctx, vmEnvironment(ns, "mac", wbv1.BackendVfkit)))
	eventually(t, 20*time.Second, "vfkit-system.v1 environment placed on the macOS node", func() (bool, string) {
		var e wbv1.Environment
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mac"}, &e); err != nil {
			return false, err.Error()
		}
		return e.Status.NodeName == "wb-mac-1", fmt.Sprintf("%+v", e.Status)
	})
}

// TestPoolOfABackendNoNodeCanOfferStalls: an EnvironmentPool whose template names a backend
// no node can offer creates no member (admission would refuse each) and says why in its
// Stalled condition, instead of retrying creates forever.
func TestPoolOfABackendNoNodeCanOfferStalls(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, env.Client.Create(ctx, &wbv1.EnvironmentPool{ObjectMeta: metav1.ObjectMeta{Name: "fc", Namespace: ns},
		Spec: wbv1.EnvironmentPoolSpec{Template: vmEnvironment(ns, "x", wbv1.BackendFirecracker).Spec, Replicas: ptr(int32(2))}}))
	eventually(t, 20*time.Second, "pool stalled with backend-not-offered", func() (bool, string) {
		var p wbv1.EnvironmentPool
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fc"}, &p); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(p.Status.Conditions, wbv1.ConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "BackendNotOffered" && p.Status.Replicas == 0, fmt.Sprintf("%+v", p.Status)
	})
	var list wbv1.EnvironmentList
	must(t, env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{wbv1.PoolLabel: "fc"}))
	if len(list.Items) != 0 {
		t.Fatalf("%d members created for a pool of a backend no node offers", len(list.Items))
	}
}
